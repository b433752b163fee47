// Sums and maxima across a warp and across a block, the building block of every row-wise
// kernel (LayerNorm statistics, softmax, norms).
#pragma once
#include <cuda_runtime.h>

namespace gpt::cuda {

__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Every thread of the block gets the result. blockDim.x must be a multiple of 32 (at most
// 1024); `shared` holds 32 floats. Contains __syncthreads(): call from all threads.
__device__ inline float block_sum(float v, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // `shared` may still be read from a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : 0.0f;
    return warp_sum(v);
}

__device__ inline float block_max(float v, float* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < warps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

inline unsigned ceil_div(size_t n, unsigned d) { return static_cast<unsigned>((n + d - 1) / d); }

}  // namespace gpt::cuda
