// bench_ceilings: the two ceilings of the benchmark ladder (tests/bench/README.md), measured on the
// local GPU, so that every stage's number can be read against what this chip can actually do:
//
//   bandwidth  a large device-to-device copy. A kernel that only moves data (LayerNorm, GELU,
//              AdamW, ...) cannot go faster than this.
//   matmul     a large dense bf16 GEMM through cuBLASLt with fp32 accumulation. No matmul, and
//              so no training step built from matmuls, can beat this FLOP rate.
//
// Measuring follows the rules of the ladder: warm-up runs first (clocks ramp up, cuBLASLt picks
// and loads its kernel), every run is timed with CUDA events on the GPU itself, the median of
// the runs is reported (robust to one slow outlier), and the inputs are random non-zero numbers:
// on all-zero inputs some GPUs draw less power and clock higher, which inflates the result.
//
// usage: bench_ceilings [--json PATH] [--copy-mib N] [--gemm N] [--iters N] [--warmup N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/gemm.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "util/error.h"

namespace {

using gpt::bf16;
using gpt::Error;
using gpt::cuda::DeviceBuffer;

struct Options {
    size_t copy_mib = 2048;  // 2 GiB: far larger than any L2 cache, so the copy goes to DRAM
    int gemm = 8192;         // M = N = K: large enough to keep every SM busy for about a millisecond
    int iters = 20;          // timed runs; the median of these is reported
    int warmup = 5;          // untimed runs first
    std::string json;
};

const char* kUsage =
    "usage: bench_ceilings [options]\n\n"
    "Measures the two ceilings of the benchmark ladder on GPU 0: device-to-device copy\n"
    "bandwidth and dense bf16 matrix throughput (cuBLASLt, fp32 accumulation).\n\n"
    "  --json PATH    also write the results as JSON\n"
    "  --copy-mib N   bytes copied per run, in MiB [2048]\n"
    "  --gemm N       GEMM size M = N = K [8192]\n"
    "  --iters N      timed runs, at least 10; the median is reported [20]\n"
    "  --warmup N     untimed runs before timing [5]\n"
    "  --help         this text\n";

long parse_int(const std::string& opt, const std::string& s, long min_value) {
    char* end = nullptr;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < min_value)
        throw Error("option " + opt + ": '" + s + "' is not a whole number >= " + std::to_string(min_value));
    return v;
}

Options parse(int argc, char** argv, bool& help) {
    Options o;
    help = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            help = true;
            return o;
        }
        if (i + 1 >= argc) throw Error("option " + arg + " needs a value (see --help)");
        const std::string value = argv[++i];
        if (arg == "--json") o.json = value;
        else if (arg == "--copy-mib") o.copy_mib = static_cast<size_t>(parse_int(arg, value, 1));
        else if (arg == "--gemm") o.gemm = static_cast<int>(parse_int(arg, value, 16));
        else if (arg == "--iters") o.iters = static_cast<int>(parse_int(arg, value, 10));
        else if (arg == "--warmup") o.warmup = static_cast<int>(parse_int(arg, value, 1));
        else throw Error("unknown option '" + arg + "' (see --help)");
    }
    return o;
}

// A well-mixed 32-bit hash of (index, seed): random-looking values without a generator state
// and without copying gigabytes from the host.
__device__ inline uint32_t hash32(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return static_cast<uint32_t>(x);
}

// Uniform values in [-1, 1), never exactly zero (a zero would need all 24 bits to be 2^23).
template <class T>
__global__ void fill_random(T* p, size_t n, uint32_t seed) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const uint32_t h = hash32(i * 0x9e3779b97f4a7c15ull + seed) >> 8;  // 24 random bits
        float u = (static_cast<float>(h) + 0.5f) / 16777216.0f * 2.0f - 1.0f;
        p[i] = gpt::from_float<T>(u);
    }
}

template <class T>
void fill(T* p, size_t n, uint32_t seed, cudaStream_t stream) {
    const unsigned blocks = std::min<unsigned>(gpt::cuda::ceil_div(n, 256), 65535u * 8u);
    fill_random<<<blocks, 256, 0, stream>>>(p, n, seed);
    LAUNCH_CHECK();
}

double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs op() `warmup` times untimed, then `iters` times, each bracketed by two CUDA events on
// the stream; returns the median milliseconds per run. Events measure GPU time, so the host's
// launch overhead does not count, and one event pair per run lets us take a median.
template <class Op>
double median_ms(cudaStream_t stream, int warmup, int iters, Op op) {
    for (int i = 0; i < warmup; ++i) op();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms(iters);
    for (int i = 0; i < iters; ++i) {
        CUDA_CHECK(cudaEventRecord(start, stream));
        op();
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return median(ms);
}

struct CopyResult {
    size_t bytes = 0;
    double ms = 0, gb_per_s = 0;
};

CopyResult measure_copy(const Options& o, cudaStream_t stream) {
    CopyResult r;
    r.bytes = o.copy_mib << 20;
    // Two buffers of that size must fit; leave a margin for the CUDA context and cuBLAS.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t fits = free_bytes / 2 / 10 * 8;
    if (r.bytes > fits) {
        r.bytes = fits / (size_t(1) << 20) * (size_t(1) << 20);
        std::printf("note          only %.2f GiB free: copying %.2f GiB instead\n", free_bytes / 1073741824.0,
                    r.bytes / 1073741824.0);
    }
    const size_t n = r.bytes / sizeof(float);
    DeviceBuffer<float> src(n), dst(n);
    fill(src.data(), n, 1u, stream);
    fill(dst.data(), n, 2u, stream);  // different contents, so the check below means something

    r.ms = median_ms(stream, o.warmup, o.iters, [&] {
        CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), r.bytes, cudaMemcpyDeviceToDevice, stream));
    });
    // A copy reads every byte once and writes it once: 2 x bytes cross the memory bus. This is
    // the convention of CUDA's bandwidthTest and of the kernels' own accounting (bytes read +
    // bytes written), so a kernel's achieved bandwidth can be compared with it directly.
    r.gb_per_s = 2.0 * r.bytes / (r.ms / 1e3) / 1e9;

    // The copy really happened: the first and last elements of both buffers agree.
    const size_t k = std::min<size_t>(n, 1024);
    std::vector<float> a(k), b(k);
    for (size_t offset : {size_t(0), n - k}) {
        CUDA_CHECK(cudaMemcpy(a.data(), src.data() + offset, k * sizeof(float), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), dst.data() + offset, k * sizeof(float), cudaMemcpyDeviceToHost));
        if (std::memcmp(a.data(), b.data(), k * sizeof(float)) != 0)
            throw Error("device-to-device copy check failed: destination differs from source");
    }
    return r;
}

struct GemmResult {
    int m = 0, n = 0, k = 0;
    double ms = 0, tflops = 0;
};

GemmResult measure_gemm(const Options& o, cudaStream_t stream) {
    GemmResult r;
    r.m = r.n = r.k = o.gemm;
    const int M = r.m, N = r.n, K = r.k;
    // Row-major C[M x N] = A[M x K] · B[N x K]ᵀ: the shape of a Linear layer's forward pass
    // (weights stored [out x in]), through the same cuBLASLt wrapper the stages use.
    DeviceBuffer<bf16> A(size_t(M) * K), B(size_t(N) * K), C(size_t(M) * N);
    fill(A.data(), A.size(), 3u, stream);
    fill(B.data(), B.size(), 4u, stream);
    fill(C.data(), C.size(), 5u, stream);  // poison: the result must overwrite it
    gpt::cuda::GemmContext gemm;
    r.ms = median_ms(stream, o.warmup, o.iters, [&] {
        gemm.gemm(stream, CUBLAS_COMPUTE_32F, false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    });
    r.tflops = 2.0 * M * double(N) * K / (r.ms / 1e3) / 1e12;  // one multiply and one add per term

    // The numbers are real: check a few results against a dot product on the host.
    std::vector<bf16> a(K), b(K), c(1);
    for (const auto& [i, j] : {std::pair<int, int>{0, 0}, {M - 1, N - 1}, {M / 3, N / 2}}) {
        CUDA_CHECK(cudaMemcpy(a.data(), A.data() + size_t(i) * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), B.data() + size_t(j) * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(c.data(), C.data() + size_t(i) * N + j, sizeof(bf16), cudaMemcpyDeviceToHost));
        double ref = 0, scale = 0;
        for (int t = 0; t < K; ++t) {
            const double x = gpt::to_float(a[t]), y = gpt::to_float(b[t]);
            ref += x * y;
            scale += std::fabs(x * y);
        }
        const double got = gpt::to_float(c[0]);
        // bf16 output: about 3 significant digits of the result (2^-8 relative), plus the
        // fp32 accumulation error, which is far smaller.
        if (!(std::fabs(got - ref) <= 1e-2 * std::fabs(ref) + 1e-4 * scale))
            throw Error("GEMM check failed at (" + std::to_string(i) + ", " + std::to_string(j) + "): got " +
                        std::to_string(got) + ", expected " + std::to_string(ref));
    }
    return r;
}

std::string json_escape(const std::string& s) {
    std::string out;
    for (char ch : s) {
        if (ch == '"' || ch == '\\') out += '\\';
        out += ch;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        bool help = false;
        const Options o = parse(argc, argv, help);
        if (help) {
            std::printf("%s", kUsage);
            return 0;
        }
        if (gpt::cuda::device_count() == 0) throw Error("no CUDA device found: bench_ceilings measures a GPU");
        gpt::cuda::require_device();  // and one the stages support
        const std::string name = gpt::cuda::device_name();
        const double peak = gpt::cuda::peak_bf16_flops(name);
        std::printf("device        %s\n", gpt::cuda::device_description().c_str());
        std::fflush(stdout);

        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const CopyResult copy = measure_copy(o, stream);
        std::printf("bandwidth     %.2f GiB device-to-device copy: %.3f ms (median of %d) = %.0f GB/s read + written\n",
                    copy.bytes / 1073741824.0, copy.ms, o.iters, copy.gb_per_s);
        std::fflush(stdout);
        const GemmResult g = measure_gemm(o, stream);
        char of_peak[64] = "";
        if (peak > 0)
            std::snprintf(of_peak, sizeof(of_peak), " (%.0f%% of the %.0f TFLOP/s data-sheet peak)",
                          100.0 * g.tflops * 1e12 / peak, peak / 1e12);
        std::printf("matmul        bf16 %dx%dx%d GEMM, fp32 accumulation: %.3f ms (median of %d) = %.1f TFLOP/s%s\n",
                    g.m, g.n, g.k, g.ms, o.iters, g.tflops, of_peak);
        CUDA_CHECK(cudaStreamDestroy(stream));

        if (!o.json.empty()) {
            const std::string tmp = o.json + ".tmp";
            FILE* f = std::fopen(tmp.c_str(), "w");
            if (!f) throw Error("--json " + o.json + ": cannot open for writing");
            std::fprintf(f,
                         "{\n  \"device_name\": \"%s\",\n  \"device\": \"%s\",\n"
                         "  \"datasheet_bf16_tflops\": %s,\n  \"iters\": %d,\n  \"warmup\": %d,\n"
                         "  \"copy\": {\"bytes\": %zu, \"ms_median\": %.6f, \"gb_per_s\": %.3f},\n"
                         "  \"gemm\": {\"m\": %d, \"n\": %d, \"k\": %d, \"dtype\": \"bf16\", \"accumulate\": \"fp32\", "
                         "\"ms_median\": %.6f, \"tflops\": %.3f}\n}\n",
                         json_escape(name).c_str(), json_escape(gpt::cuda::device_description()).c_str(),
                         peak > 0 ? std::to_string(peak / 1e12).c_str() : "null", o.iters, o.warmup, copy.bytes,
                         copy.ms, copy.gb_per_s, g.m, g.n, g.k, g.ms, g.tflops);
            const bool ok = std::fclose(f) == 0;
            if (!ok || std::rename(tmp.c_str(), o.json.c_str()) != 0)
                throw Error("--json " + o.json + ": cannot write");
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
