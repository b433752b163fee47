// Which GPUs a stage runs on. Each stage policy names the oldest compute capability it needs and
// why (kMinComputeCapability and kGpuReason in stages/*/stage.cuh); this is what the trainer, the
// GPU tests and --help say about it. Plain C++ on what the CUDA runtime reports (name, compute
// capability), so that the CPU tests check it with made-up GPUs; common/cuda/device.cuh asks
// the GPU.
#pragma once
#include <string>

namespace gpt {

// The oldest GPUs CUDA 13 builds for: compute capability 7.5 (Turing: T4, RTX 20xx); Maxwell,
// Pascal and Volta are gone. Stage 00 needs nothing newer, so any GPU this holds for runs it.
inline constexpr int kCudaOldestComputeCapability = 75;

// What a program asks of the GPU.
struct GpuNeed {
    std::string what;        // "stage 01_tf32"
    int compute_capability;  // the oldest it runs on, major * 10 + minor: 80 is sm_80
    std::string reason;      // "TF32 tensor cores"
};

// "8.0" for 80.
inline std::string compute_capability_name(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

// The architecture that compute capability `cc` belongs to: "Ampere" for 80 and 86.
inline const char* architecture_name(int cc) {
    return cc >= 100 ? "Blackwell" : cc >= 90 ? "Hopper" : cc >= 89 ? "Ada" : cc >= 80 ? "Ampere"
           : cc >= 75 ? "Turing"
                      : "pre-Turing";
}

// --help and the banner: "needs compute capability 8.0 or newer (TF32 tensor cores)".
inline std::string describe_gpu_need(const GpuNeed& need) {
    return "needs compute capability " + compute_capability_name(need.compute_capability) + " or newer (" +
           need.reason + ")";
}

namespace detail {
// "compute capability 8.0 (Ampere) or newer"
inline std::string at_least(int cc) {
    return "compute capability " + compute_capability_name(cc) + " (" + architecture_name(cc) + ") or newer";
}
// A GPU older than CUDA 13 builds for runs no stage; when the stage asks no more than CUDA does,
// that, not the stage's reason, is what stops it.
inline bool too_old_for_cuda(int cc) { return cc < kCudaOldestComputeCapability; }
inline bool cuda_is_the_reason(int cc, const GpuNeed& need) {
    return too_old_for_cuda(cc) && need.compute_capability <= kCudaOldestComputeCapability;
}
}  // namespace detail

// Why a GPU of compute capability major.minor cannot run what `need` describes, as the one line
// the trainer stops with, and what runs there instead; empty when it can run it.
inline std::string gpu_refusal(const std::string& name, int major, int minor, const GpuNeed& need) {
    const int cc = major * 10 + minor;
    if (cc >= need.compute_capability) return "";
    const std::string cuda = "CUDA 13 builds for " + detail::at_least(kCudaOldestComputeCapability);
    std::string line = "GPU " + name + " (sm_" + std::to_string(cc) + ") cannot run " + need.what + ": ";
    if (detail::cuda_is_the_reason(cc, need)) return line + cuda + ", so no stage runs on this GPU";
    line += "it needs " + detail::at_least(need.compute_capability) + " for " + need.reason;
    if (detail::too_old_for_cuda(cc)) return line + "; no stage runs on this GPU, since " + cuda;
    return line + "; stage 00 runs on this GPU (cmake --preset stage00)";
}

// The same for a GPU test, which skips instead: one clause, empty when the GPU will do. Free of
// ':' and '"', which would end it early in the log line "<why>: GPU test skipped" that
// tests/after_tests.cmake reads.
inline std::string gpu_test_skip_reason(const std::string& name, int major, int minor, const GpuNeed& need) {
    const int cc = major * 10 + minor;
    if (cc >= need.compute_capability) return "";
    std::string why = "GPU " + name + " (sm_" + std::to_string(cc) + ") cannot run " + need.what + ", which needs ";
    if (detail::cuda_is_the_reason(cc, need)) why += detail::at_least(kCudaOldestComputeCapability) + " with CUDA 13";
    else why += detail::at_least(need.compute_capability) + " for " + need.reason;
    for (char& c : why)
        if (c == ':' || c == '"') c = ' ';
    return why;
}

}  // namespace gpt
