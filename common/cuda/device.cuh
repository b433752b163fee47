// The GPU we run on: is there one, what is it, and its dense bf16 tensor-core peak (the MFU
// denominator, the same for every stage so that the ladder is comparable).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "util/error.h"

namespace gpt::cuda {

// How many blocks of `kernel` the whole GPU holds at once (one wave): the grid of a grid-stride
// kernel that should start every block right away, and no more. Queues nothing, so it may be
// called while a CUDA Graph is being recorded.
template <class Kernel>
unsigned one_wave(Kernel kernel, int threads, size_t shared_bytes) {
    int device = 0, sms = 0, blocks_per_sm = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, shared_bytes) != cudaSuccess)
        throw Error(std::string("cannot query the GPU's occupancy: ") + cudaGetErrorString(cudaGetLastError()));
    return static_cast<unsigned>(sms * blocks_per_sm > 1 ? sms * blocks_per_sm : 1);
}

inline int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return n;
}

inline void require_device() {
    if (device_count() == 0)
        throw Error("no CUDA device found; to train on the CPU instead: cmake --preset cpu && ./train");
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, 0);
    if (p.major < 8)
        throw Error(std::string("GPU ") + p.name + " has compute capability " + std::to_string(p.major) + "." +
                    std::to_string(p.minor) + "; the stages need 8.0 (Ampere) or newer");
}

inline std::string device_name() {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown GPU";
    return p.name;
}

inline std::string device_description() {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "unknown GPU";
    return std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB, sm_" +
           std::to_string(p.major) + std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs";
}

// Dense (no sparsity) bf16 tensor-core peaks with fp32 accumulation, from the vendor data
// sheets. A GPU's name is matched against `match`; the first match wins, so more specific
// names come first.
struct PeakEntry {
    const char* match;
    double tflops;
};

// The table's entry for a GPU name, or nullptr when the GPU is not in it.
inline const PeakEntry* find_peak(const std::string& name) {
    static const PeakEntry kPeaks[] = {
        {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200", 989}, {"GH200", 989},
        {"B200", 2250},     {"A100", 312},     {"A800", 312}, {"L40S", 362}, {"L40", 181},
        {"L4", 121},        {"A10G", 70},      {"A10", 125},  {"RTX 4090", 165}, {"RTX 3090", 71},
    };
    for (const PeakEntry& p : kPeaks)
        if (name.find(p.match) != std::string::npos) return &p;
    return nullptr;
}

// The peak in FLOP/s; 0 when unknown (MFU is then not reported).
inline double peak_bf16_flops(const std::string& name) {
    const PeakEntry* p = find_peak(name);
    return p ? p->tflops * 1e12 : 0.0;
}

// Which table entry gave that peak ("H100" for "NVIDIA H100 80GB HBM3"); empty when none did.
// Written into the trainer's log, so that a reader sees where the MFU denominator came from.
inline std::string peak_bf16_match(const std::string& name) {
    const PeakEntry* p = find_peak(name);
    return p ? p->match : "";
}

}  // namespace gpt::cuda
