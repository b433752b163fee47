// What the benchmarks of this directory share: bench_ceilings (ceilings.cu) and the kernel
// benchmark of every stage, bench_stageNN (kernel_bench.cuh). Written once, so that both
// measure the same way:
//
//   random inputs,  common/cuda/ceilings.cuh, which a trainer's --profile shares too: inputs made
//   timing and      on the device and never all zero; warm-up runs, then CUDA events around each
//   the ceilings    run and the median; a large device-to-device copy (bandwidth) and a large
//                   bf16 GEMM through cuBLASLt (matrix throughput), each checked
//   the clock       the SM clock and its throttle reasons beside each figure (util/gpu_clock.h)
//   the edges       exit statuses, option values, JSON numbers (strings: Logger::json_string),
//                   writing the output file
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/ceilings.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/gemm.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "train/logger.h"
#include "util/error.h"
#include "util/file.h"
#include "util/gpu_clock.h"

namespace gpt::bench {

// The measuring both benchmarks share with the trainers (common/cuda/ceilings.cuh).
using cuda::CopyCeiling;
using cuda::fill_blocks;
using cuda::fill_random;
using cuda::fill_tokens;
using cuda::GemmCeiling;
using cuda::kCeilingIters;
using cuda::kCeilingWarmup;
using cuda::kCeilingWarmupMs;
using cuda::kCopyMiB;
using cuda::kGemmSize;
using cuda::measure_copy;
using cuda::measure_gemm;
using cuda::median;
using cuda::time_runs;
using cuda::describe;

// ---- the clock a figure was measured at --------------------------------------------------------

// The clock reader of the GPU this process uses (CUDA's current device).
inline std::unique_ptr<GpuClockReader> clock_reader() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    char bus_id[32] = "";
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
    return std::make_unique<GpuClockReader>(bus_id);
}

// "SM 1980 MHz, throttle reasons: none, 612 W, 48 C"; why there is none where there is none.
inline std::string describe(const GpuClock& c, const GpuClockReader& reader) {
    if (!c.read)
        return "not read: " + (reader.why_unavailable().empty() ? "NVML gave no reading" : reader.why_unavailable());
    std::string s = "SM " + std::to_string(c.sm_mhz) + " MHz, throttle reasons: " + clock_reason_names(c.reasons);
    if (c.power_mw) s += ", " + std::to_string(c.power_mw / 1000) + " W";
    if (c.temperature_c) s += ", " + std::to_string(c.temperature_c) + " C";
    return s;
}

// ---- exit statuses and failures -------------------------------------------------------------

constexpr int kExitOk = 0;
constexpr int kExitError = 1;  // a CUDA error, a failed check, an output file that cannot be written
constexpr int kExitUsage = 2;  // an unknown option or a bad value
constexpr int kExitNoGpu = 3;  // no CUDA device, or one older than the program needs

struct UsageError : Error {
    using Error::Error;
};
struct NoGpuError : Error {
    using Error::Error;
};

// Throws NoGpuError unless GPU 0 can run what `need` describes: by default the bf16 tensor cores
// bench_ceilings measures; a stage's benchmark asks for what the stage needs.
inline void require_gpu(const GpuNeed& need = {"bench_ceilings", 80, "bf16 tensor cores"}) {
    if (cuda::device_count() == 0) throw NoGpuError("no CUDA device found");
    try {
        cuda::require_device(need);
    } catch (const Error& e) {
        throw NoGpuError(e.what());
    }
}

// The one line a benchmark prints when it cannot go on, and the exit status that goes with it.
inline int fail(const char* program, const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    if (dynamic_cast<const UsageError*>(&e)) return kExitUsage;
    if (dynamic_cast<const NoGpuError*>(&e)) return kExitNoGpu;
    return kExitError;
}

// ---- option values ----------------------------------------------------------------------------

// A command line of "--name value" pairs, each name from `names`, or --help (-h) anywhere before
// a bad option. Returns the pairs in order; with help set, what came before it.
inline std::vector<std::pair<std::string, std::string>> option_pairs(int argc, char** argv,
                                                                     std::initializer_list<const char*> names,
                                                                     bool& help) {
    std::vector<std::pair<std::string, std::string>> pairs;
    help = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            help = true;
            return pairs;
        }
        bool known = false;
        for (const char* name : names) known = known || arg == name;
        if (!known) throw UsageError("unknown option '" + arg + "' (see --help)");
        if (i + 1 >= argc) throw UsageError("option " + arg + " needs a value (see --help)");
        pairs.emplace_back(arg, argv[++i]);
    }
    return pairs;
}

inline long parse_whole_number(const std::string& option, const std::string& s, long min_value, long max_value) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < min_value || v > max_value)
        throw UsageError("option " + option + ": '" + s + "' is not a whole number from " +
                         std::to_string(min_value) + " to " + std::to_string(max_value));
    return v;
}

// ---- JSON and the output file -----------------------------------------------------------------

// A number with enough digits, or null for one that was not measured (NaN) or does not apply.
inline std::string json_number(double v, const char* format = "%.6g") {
    if (!std::isfinite(v)) return "null";
    char s[64];
    std::snprintf(s, sizeof(s), format, v);
    return s;
}

// The ceilings as JSON objects (the ladder reads these keys from bench_ceilings' file).
inline std::string to_json(const CopyCeiling& c) {
    return "{\"bytes\": " + std::to_string(c.bytes) + ", \"ms_median\": " + json_number(c.ms, "%.6f") +
           ", \"gb_per_s\": " + json_number(c.gb_per_s, "%.3f") + "}";
}
// A reading as a JSON object (null: none was made); reasons both as NVML's mask and in words.
inline std::string to_json(const GpuClock& c) {
    if (!c.read) return "null";
    char mask[32];
    std::snprintf(mask, sizeof(mask), "\"0x%llx\"", static_cast<unsigned long long>(c.reasons));
    return "{\"sm_mhz\": " + std::to_string(c.sm_mhz) + ", \"throttle_reasons\": " + mask +
           ", \"throttle\": " + Logger::json_string(clock_reason_names(c.reasons)) +
           ", \"power_w\": " + (c.power_mw ? json_number(c.power_mw / 1000.0, "%.1f") : std::string("null")) +
           ", \"temperature_c\": " + (c.temperature_c ? std::to_string(c.temperature_c) : std::string("null")) + "}";
}
inline std::string to_json(const GemmCeiling& g) {
    return "{\"m\": " + std::to_string(g.m) + ", \"n\": " + std::to_string(g.n) + ", \"k\": " + std::to_string(g.k) +
           ", \"dtype\": \"bf16\", \"accumulate\": \"fp32\", \"ms_median\": " + json_number(g.ms, "%.6f") +
           ", \"tflops\": " + json_number(g.tflops, "%.3f") + "}";
}

// Fails before any measuring if the output file cannot be written (a missing directory, a path
// that is a directory, a FIFO or a device), instead of after the whole run.
inline void check_writable(const std::string& option, const std::string& path) {
    try {
        require_writable_path(path, option);
    } catch (const Error& e) {
        throw UsageError(e.what());
    }
}

// Writes the whole text to PATH.tmp, then renames it over PATH: a reader never sees a
// half-written file (util/file.h).
inline void write_file(const std::string& option, const std::string& path, const std::string& text) {
    ReplacingFile file(path, option);
    file.write(text);
    file.commit();
}

}  // namespace gpt::bench
