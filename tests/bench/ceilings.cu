// bench_ceilings: the two ceilings of the benchmark ladder (tests/bench/README.md), measured on the
// local GPU, so that every stage's number can be read against what this chip can actually do:
//
//   bandwidth  a large device-to-device copy. A kernel that only moves data (LayerNorm, GELU,
//              AdamW, ...) cannot go faster than this.
//   matmul     a large dense bf16 GEMM through cuBLASLt with fp32 accumulation. No matmul, and
//              so no training step built from matmuls, can beat this FLOP rate.
//
// How both are measured (a warm-up of at least 0.5 s, CUDA events, medians, random non-zero
// inputs, a check of the result; the SM clock read right after each) is in measure.cuh, which the
// kernel benchmark of every stage (bench_stageNN) shares, so that it measures the same ceilings
// in its own run.
//
// usage: bench_ceilings [--json PATH] [--copy-mib N] [--gemm N] [--iters N] [--warmup N]
// exit status: 0 measured, 1 a CUDA error or a failed check, 2 a bad option, 3 no usable GPU
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "measure.cuh"

namespace {

using gpt::bench::UsageError;
namespace bench = gpt::bench;

struct Options {
    size_t copy_mib = bench::kCopyMiB;
    int gemm = bench::kGemmSize;
    int iters = bench::kCeilingIters;
    int warmup = bench::kCeilingWarmup;
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
    "  --warmup N     untimed runs before timing, at least; and at least 0.5 s of them [5]\n"
    "  --help         this text\n\n"
    "Exit status: 0 measured, 1 a CUDA error or a failed check, 2 a bad option, 3 no usable GPU.\n";

Options parse(int argc, char** argv, bool& help) {
    Options o;
    for (const auto& [option, value] :
         bench::option_pairs(argc, argv, {"--json", "--copy-mib", "--gemm", "--iters", "--warmup"}, help)) {
        if (option == "--json") o.json = value;
        else if (option == "--copy-mib")
            o.copy_mib = static_cast<size_t>(bench::parse_whole_number(option, value, 1, 1 << 20));
        else if (option == "--gemm") o.gemm = static_cast<int>(bench::parse_whole_number(option, value, 16, 65536));
        else if (option == "--iters") o.iters = static_cast<int>(bench::parse_whole_number(option, value, 10, 10000));
        else o.warmup = static_cast<int>(bench::parse_whole_number(option, value, 1, 1000));
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        bool help = false;
        const Options o = parse(argc, argv, help);
        if (help) {
            std::printf("%s", kUsage);
            return bench::kExitOk;
        }
        if (!o.json.empty()) bench::check_writable("--json", o.json);
        bench::require_gpu();
        const std::string name = gpt::cuda::device_name();
        const double peak = gpt::cuda::peak_bf16_flops(name);
        std::printf("device        %s\n", gpt::cuda::device_description().c_str());
        std::fflush(stdout);

        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const auto clocks = bench::clock_reader();  // before: NVML takes a moment to start
        const bench::CopyCeiling copy = bench::measure_copy(o.copy_mib << 20, o.warmup, o.iters, stream);
        if (copy.bytes < (o.copy_mib << 20))
            std::printf("note          not enough free device memory for %zu MiB: copied %.2f GiB instead\n",
                        o.copy_mib, copy.bytes / 1073741824.0);
        const gpt::GpuClock copy_clock = clocks->read();
        std::printf("bandwidth     %s\n", bench::describe(copy, o.iters).c_str());
        std::printf("  clock       %s\n", bench::describe(copy_clock, *clocks).c_str());
        std::fflush(stdout);
        const bench::GemmCeiling gemm = bench::measure_gemm(o.gemm, o.warmup, o.iters, stream);
        const gpt::GpuClock gemm_clock = clocks->read();
        char of_peak[64] = "";
        if (peak > 0)
            std::snprintf(of_peak, sizeof(of_peak), " (%.0f%% of the %.0f TFLOP/s data-sheet peak)",
                          100.0 * gemm.tflops * 1e12 / peak, peak / 1e12);
        std::printf("matmul        %s%s\n", bench::describe(gemm, o.iters).c_str(), of_peak);
        std::printf("  clock       %s\n", bench::describe(gemm_clock, *clocks).c_str());
        CUDA_CHECK(cudaStreamDestroy(stream));

        if (!o.json.empty()) {
            const std::string json =
                "{\n  \"device_name\": " + gpt::Logger::json_string(name) +
                ",\n  \"device\": " + gpt::Logger::json_string(gpt::cuda::device_description()) +
                ",\n  \"datasheet_bf16_tflops\": " + (peak > 0 ? bench::json_number(peak / 1e12) : "null") +
                ",\n  \"iters\": " + std::to_string(o.iters) + ",\n  \"warmup\": " + std::to_string(o.warmup) +
                ",\n  \"warmup_ms\": " + bench::json_number(bench::kCeilingWarmupMs) +
                ",\n  \"copy\": " + bench::to_json(copy) + ",\n  \"gemm\": " + bench::to_json(gemm) +
                ",\n  \"clock\": {\"copy\": " + bench::to_json(copy_clock) +
                ", \"gemm\": " + bench::to_json(gemm_clock) + "}\n}\n";
            bench::write_file("--json", o.json, json);
        }
        return bench::kExitOk;
    } catch (const std::exception& e) {
        return bench::fail("bench_ceilings", e);
    }
}
