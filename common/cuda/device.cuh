// The GPU we run on: is there one, what is it, and its dense bf16 tensor-core peak (the MFU
// denominator, the same for every stage so that the ladder is comparable).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "util/error.h"

namespace gpt::cuda {

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

// Dense (no sparsity) bf16 tensor-core FLOP/s with fp32 accumulation, from the vendor data
// sheets; 0 when unknown (MFU is then not reported).
inline double peak_bf16_flops(const std::string& name) {
    struct Peak {
        const char* match;
        double tflops;
    };
    // First match wins: more specific names first.
    static const Peak kPeaks[] = {
        {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200", 989}, {"GH200", 989},
        {"B200", 2250},     {"A100", 312},     {"A800", 312}, {"L40S", 362}, {"L40", 181},
        {"L4", 121},        {"A10G", 70},      {"A10", 125},  {"RTX 4090", 165}, {"RTX 3090", 71},
    };
    for (const Peak& p : kPeaks)
        if (name.find(p.match) != std::string::npos) return p.tflops * 1e12;
    return 0.0;
}

}  // namespace gpt::cuda
