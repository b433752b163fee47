// The two ceilings of a GPU, measured on it: a large device-to-device copy (bandwidth) and a
// large bf16 GEMM through cuBLASLt (matrix throughput), each checked for a right result; and
// what measuring them needs: random inputs made on the device (never all zeros: on all-zero
// inputs some GPUs draw less power and clock higher, which inflates a result), and timing with
// CUDA events (warm-up runs first, then the median of the timed runs). Shared by the benchmarks
// (tests/bench/measure.cuh: bench_ceilings, bench_stageNN) and a trainer's --profile, which
// reads each op against the same ceilings.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

namespace gpt::cuda {

// ---- random inputs on the device ------------------------------------------------------------

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

__device__ inline uint32_t random_bits(size_t i, uint32_t seed) { return hash32(i * 0x9e3779b97f4a7c15ull + seed); }

// offset + scale · r with r uniform in (-1, 1). r is (2h + 1 - 2^24) / 2^24 for 24 random bits h:
// an odd numerator, so r is never 0, and every step is exact in float.
template <class T>
__global__ void fill_random_kernel(T* p, size_t n, uint32_t seed, float offset, float scale) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const int h = static_cast<int>(random_bits(i, seed) >> 8);  // 24 random bits
        const float r = static_cast<float>(2 * h + 1 - (1 << 24)) / 16777216.0f;
        p[i] = from_float<T>(offset + scale * r);
    }
}

// Token ids uniform in [0, V). `static`, as every non-template kernel in a header.
static __global__ void fill_tokens_kernel(int* p, size_t n, uint32_t seed, int V) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride)
        p[i] = static_cast<int>(random_bits(i, seed) % static_cast<uint32_t>(V));
}

// Grid-stride launches: enough blocks to fill the GPU, not one per element.
inline unsigned fill_blocks(size_t n) { return std::min<unsigned>(cuda::ceil_div(n, 256), 65535u * 8u); }

// n values offset + scale · r, r uniform in (-1, 1) and never 0: with offset 0 no value is zero,
// with offset > scale every value is positive.
template <class T>
void fill_random(T* p, size_t n, uint32_t seed, cudaStream_t stream, float scale = 1.0f, float offset = 0.0f) {
    if (n == 0) return;
    fill_random_kernel<<<fill_blocks(n), 256, 0, stream>>>(p, n, seed, offset, scale);
    LAUNCH_CHECK();
}

inline void fill_tokens(int* p, size_t n, uint32_t seed, int V, cudaStream_t stream) {
    if (n == 0) return;
    fill_tokens_kernel<<<fill_blocks(n), 256, 0, stream>>>(p, n, seed, V);
    LAUNCH_CHECK();
}

// ---- timing -----------------------------------------------------------------------------------

inline double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs op() `warmup` times untimed, then `iters` times, each bracketed by two CUDA events on the
// stream; returns the milliseconds of each timed run. Events measure GPU time, so the host's
// launch overhead between runs does not count, and one event pair per run lets us take a median.
// before_each() runs before every run, outside the events: it restores an input that the op
// overwrites, or pushes the op's data out of the L2 cache.
template <class Op, class Before>
std::vector<float> time_runs(cudaStream_t stream, int warmup, int iters, Op&& op, Before&& before_each) {
    for (int i = 0; i < warmup; ++i) {
        before_each();
        op();
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms(iters);
    for (int i = 0; i < iters; ++i) {
        before_each();
        CUDA_CHECK(cudaEventRecord(start, stream));
        op();
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms;
}

template <class Op>
std::vector<float> time_runs(cudaStream_t stream, int warmup, int iters, Op&& op) {
    return time_runs(stream, warmup, iters, op, [] {});
}

// Runs op() untimed at least `runs` times and for at least `ms` milliseconds (host clock, the GPU
// waited for). A GPU that was idle or throttled takes tens to hundreds of milliseconds to reach
// its working clock; a fixed handful of runs did not cover that (on an H200 the same GEMM ceiling
// measured 687 to 831 TFLOP/s after 5 runs).
template <class Op>
void warm_up(cudaStream_t stream, int runs, double ms, Op&& op) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
        if (i >= runs) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() >= ms)
                return;
        }
        op();
    }
}

// ---- the two ceilings ------------------------------------------------------------------------

// What both programs measure by default (bench_ceilings can change the sizes and counts).
constexpr size_t kCopyMiB = 2048;  // 2 GiB: far larger than any L2 cache, so the copy goes to DRAM
constexpr int kGemmSize = 8192;    // M = N = K: large enough to keep every SM busy for about a millisecond
constexpr int kCeilingIters = 20;  // timed runs; the median is reported
constexpr int kCeilingWarmup = 5;  // untimed runs first, at least,
constexpr double kCeilingWarmupMs = 500;  // and for at least this long (warm_up)

struct CopyCeiling {
    size_t bytes = 0;  // copied per run (less than asked for when the GPU has too little free memory)
    double ms = 0, gb_per_s = 0;
};

inline CopyCeiling measure_copy(size_t bytes, int warmup, int iters, cudaStream_t stream,
                                double warmup_ms = kCeilingWarmupMs) {
    CopyCeiling r;
    r.bytes = bytes;
    // Two buffers of that size must fit; leave a margin for the CUDA context and cuBLAS.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t fits = free_bytes / 2 / 10 * 8;
    if (r.bytes > fits) r.bytes = fits / (size_t(1) << 20) * (size_t(1) << 20);
    const size_t n = r.bytes / sizeof(float);
    cuda::DeviceBuffer<float> src(n), dst(n);
    fill_random(src.data(), n, 1u, stream);
    fill_random(dst.data(), n, 2u, stream);  // different contents, so the check below means something

    const auto copy = [&] {
        CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), r.bytes, cudaMemcpyDeviceToDevice, stream));
    };
    warm_up(stream, warmup, warmup_ms, copy);
    r.ms = median(time_runs(stream, 0, iters, copy));
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

struct GemmCeiling {
    int m = 0, n = 0, k = 0;
    double ms = 0, tflops = 0;
};

inline GemmCeiling measure_gemm(int size, int warmup, int iters, cudaStream_t stream,
                                double warmup_ms = kCeilingWarmupMs) {
    GemmCeiling r;
    r.m = r.n = r.k = size;
    const int M = r.m, N = r.n, K = r.k;
    // Row-major C[M x N] = A[M x K] · B[N x K]ᵀ: the shape of a Linear layer's forward pass
    // (weights stored [out x in]), through the same cuBLASLt wrapper the stages use.
    cuda::DeviceBuffer<bf16> A(size_t(M) * K), B(size_t(N) * K), C(size_t(M) * N);
    fill_random(A.data(), A.size(), 3u, stream);
    fill_random(B.data(), B.size(), 4u, stream);
    fill_random(C.data(), C.size(), 5u, stream);  // poison: the result must overwrite it
    cuda::GemmContext gemm;
    gemm.time_candidates(true);  // the ceiling: the fastest algorithm cuBLASLt has for the shape
    const auto product = [&] {
        gemm.gemm(stream, CUBLAS_COMPUTE_32F, false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    };
    product();  // the algorithm search (time_candidates) happens here, before the warm-up's clock starts
    warm_up(stream, warmup, warmup_ms, product);
    r.ms = median(time_runs(stream, 0, iters, product));
    r.tflops = 2.0 * M * double(N) * K / (r.ms / 1e3) / 1e12;  // one multiply and one add per term

    // The numbers are real: check a few results against a dot product on the host.
    std::vector<bf16> a(K), b(K), c(1);
    for (const auto& [i, j] : {std::pair<int, int>{0, 0}, {M - 1, N - 1}, {M / 3, N / 2}}) {
        CUDA_CHECK(cudaMemcpy(a.data(), A.data() + size_t(i) * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), B.data() + size_t(j) * K, K * sizeof(bf16), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(c.data(), C.data() + size_t(i) * N + j, sizeof(bf16), cudaMemcpyDeviceToHost));
        double ref = 0, scale = 0;
        for (int t = 0; t < K; ++t) {
            const double x = to_float(a[t]), y = to_float(b[t]);
            ref += x * y;
            scale += std::fabs(x * y);
        }
        const double got = to_float(c[0]);
        // bf16 output: about 3 significant digits of the result (2^-8 relative), plus the
        // fp32 accumulation error, which is far smaller.
        if (!(std::fabs(got - ref) <= 1e-2 * std::fabs(ref) + 1e-4 * scale))
            throw Error("GEMM check failed at (" + std::to_string(i) + ", " + std::to_string(j) + "): got " +
                        std::to_string(got) + ", expected " + std::to_string(ref));
    }
    return r;
}

// The lines both programs print for the ceilings.
inline std::string describe(const CopyCeiling& c, int iters) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%.2f GiB device-to-device copy: %.3f ms (median of %d, after a %.1f s warm-up) = %.0f GB/s "
                  "read + written",
                  c.bytes / 1073741824.0, c.ms, iters, kCeilingWarmupMs / 1e3, c.gb_per_s);
    return line;
}
inline std::string describe(const GemmCeiling& g, int iters) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "bf16 %dx%dx%d GEMM, fp32 accumulation: %.3f ms (median of %d, after a %.1f s warm-up) = "
                  "%.1f TFLOP/s",
                  g.m, g.n, g.k, g.ms, iters, kCeilingWarmupMs / 1e3, g.tflops);
    return line;
}

}  // namespace gpt::cuda
