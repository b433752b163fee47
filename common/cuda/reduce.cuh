// Sums and maxima across a warp and across a block, the building block of every row-wise
// kernel (LayerNorm statistics, softmax, norms).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

namespace gpt::cuda {

// Over the whole warp, or over each group of `lanes` neighbouring lanes (a power of two): the
// four lanes of an mma accumulator's row reduce with warp_max<4>. Every lane gets its group's result.
template <int lanes = 32>
__device__ inline float warp_sum(float v) {
    static_assert(lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0, "lanes: a power of two up to 32");
    for (int offset = lanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <int lanes = 32>
__device__ inline float warp_max(float v) {
    static_assert(lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0, "lanes: a power of two up to 32");
    for (int offset = lanes / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
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

// The online softmax's running pair over a stream of values x: m, the largest so far, and
// s = sum exp(x - m) over them, rescaled whenever m grows. Start from m = -FLT_MAX, s = 0 (not
// m = -inf: a value of -inf would then make x - m = -inf - (-inf) = NaN; this way it adds 0).
// One exp and no branch: if x is the new maximum, exp(m - x) rescales the sum so far (0 at first);
// otherwise exp(x - m) is x's own term. Pairs of several threads combine as
// sum of s · exp(m - max of m): a thread that saw nothing adds 0.
__device__ inline void online_max_sum_add(float& m, float& s, float x) {
    const float e = expf(-fabsf(x - m));
    s = x > m ? s * e + 1.0f : s + e;
    m = fmaxf(m, x);
}

inline unsigned ceil_div(size_t n, unsigned d) { return static_cast<unsigned>((n + d - 1) / d); }

// *out += the sum of f(x[i]) over n elements (the losses of a batch; squares of the gradients).
// Each block sums its part in float and adds it into the double with one atomicAdd, so the last
// bits depend on the order the blocks finish in.
template <class F>
__global__ void sum_into_kernel(double* out, const float* x, size_t n, F f) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        sum += f(x[i]);
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(sum));
}

struct Identity {
    __device__ float operator()(float x) const { return x; }
};
struct Square {
    __device__ float operator()(float x) const { return x * x; }
};

template <class F = Identity>
void sum_into(cudaStream_t stream, double* out, const float* x, size_t n, F f = F{}) {
    sum_into_kernel<<<std::min(ceil_div(n, 256), 1024u), 256, 0, stream>>>(out, x, n, f);
}

}  // namespace gpt::cuda
