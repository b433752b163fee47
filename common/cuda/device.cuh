// The GPU we run on: is there one, can a stage run on it (util/compute_capability.h), what is
// it, and its dense bf16 tensor-core peak (the MFU denominator, the same for every stage so that
// the ladder is comparable).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "util/compute_capability.h"
#include "util/error.h"
#include "util/peak_flops.h"

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

// The GPU this process uses: the current one (use_local_device() chose it, or GPU 0).
inline int current_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return device;
}

// Makes this process's own GPU the current one: GPU `local_rank` of those it sees, or its only
// one when the launcher shows each process just its own (CUDA_VISIBLE_DEVICES, Slurm's
// --gpus-per-task=1). Called once, before any stream, allocation or library handle exists, since
// each of those belongs to the GPU that was current when it was made. Returns the GPU.
inline int use_local_device(int local_rank, int local_world, const std::string& who) {
    const int devices = device_count();
    const int device = devices == 1 ? 0 : local_rank;
    if (devices == 0 || device >= devices || (devices > 1 && local_world > devices))
        throw Error(who + ": local rank " + std::to_string(local_rank) + " of " + std::to_string(local_world) +
                    " processes on this host, but this process sees " + std::to_string(devices) +
                    " GPU(s): start at most one process per GPU");
    const cudaError_t set = cudaSetDevice(device);
    if (set != cudaSuccess)
        throw Error(who + ": cannot use GPU " + std::to_string(device) + ": " + cudaGetErrorString(set));
    return device;
}

// Stops with one line unless this process's GPU can run what `need` describes (a stage: its
// policy's kMinComputeCapability).
inline void require_device(const GpuNeed& need) {
    if (device_count() == 0)
        throw Error("no CUDA device found; to train on the CPU instead: cmake --preset cpu && ./train");
    const int device = current_device();
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess)
        throw Error("cannot query GPU " + std::to_string(device) + ": " + cudaGetErrorString(cudaGetLastError()));
    const std::string refusal = gpu_refusal(p.name, p.major, p.minor, need);
    if (!refusal.empty()) throw Error(refusal);
}

inline std::string device_name() {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, current_device()) != cudaSuccess) return "unknown GPU";
    return p.name;
}

inline std::string device_description() {
    const int device = current_device();
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown GPU";
    return std::string(p.name) + ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB, sm_" +
           std::to_string(p.major) + std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) +
           " SMs" + (device_count() > 1 ? " (GPU " + std::to_string(device) + ")" : "");
}

// The peak table and the estimate live in util/peak_flops.h (plain C++, tested on the CPU);
// these names stay for the callers that ask by name only (tests/bench/ceilings.cu).
using gpt::peak_bf16_flops;
using gpt::peak_bf16_match;

// This GPU's MFU denominator: its data-sheet peak, or else an estimate from its SMs and clock.
// When the table does not know the GPU, PeakFlops::warning says so in one line for the log.
inline PeakFlops device_bf16_peak() {
    int device = 0, clock_khz = 0;
    cudaDeviceProp p{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        cudaGetLastError();
        return {};  // no peak: MFU is not reported
    }
    // The peak clock in kHz (cudaDeviceProp::clockRate is gone since CUDA 13).
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
        cudaGetLastError();
        clock_khz = 0;  // the estimate then gives 0
    }
    return bf16_peak(p.name, p.major, p.minor, p.multiProcessorCount, clock_khz);
}

}  // namespace gpt::cuda
