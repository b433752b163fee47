// Attention for text generation with a key/value cache, shared by every GPU stage: the
// sequence's earlier positions keep their q|k|v rows in the model's qkv activations, so each new
// token costs one pass over the keys so far instead of a forward over the whole context.
// It is not a training op (no backward, nothing saved) and no stage changes it; the CPU twin is
// cpu::attention_cached. Generation is small work: one block per (query, head), written for
// clarity, not speed.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "util/error.h"

namespace gpt::cuda {

constexpr int kCachedAttentionThreads = 128;

// Block (i, h): the query of position past + i, head h, over keys 0 .. past + i. Dynamic shared
// memory: one float score per key.
template <class T>
__global__ void cached_attention_kernel(T* out, const T* qkv, int past, int C, int NH) {
    extern __shared__ float scores[];
    __shared__ float reduce_scratch[32];
    const int i = blockIdx.x, h = blockIdx.y, hs = C / NH;
    const int t = past + i;  // the query's position; keys 0..t
    const float scale = rsqrtf(static_cast<float>(hs));
    const T* q = qkv + size_t(t) * 3 * C + h * hs;

    float maxv = -INFINITY;
    for (int k = threadIdx.x; k <= t; k += blockDim.x) {
        const T* key = qkv + size_t(k) * 3 * C + C + h * hs;
        float s = 0.0f;
        for (int d = 0; d < hs; ++d) s += to_float(q[d]) * to_float(key[d]);
        scores[k] = s * scale;
        maxv = fmaxf(maxv, scores[k]);
    }
    maxv = block_max(maxv, reduce_scratch);
    float sum = 0.0f;
    for (int k = threadIdx.x; k <= t; k += blockDim.x) {
        scores[k] = __expf(scores[k] - maxv);
        sum += scores[k];
    }
    sum = block_sum(sum, reduce_scratch);  // its __syncthreads() also publishes every score
    const float inv = 1.0f / sum;
    // One output element per thread: neighbouring threads read neighbouring values.
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float acc = 0.0f;
        for (int k = 0; k <= t; ++k) acc += scores[k] * to_float(qkv[size_t(k) * 3 * C + 2 * C + h * hs + d]);
        out[size_t(i) * C + h * hs + d] = from_float<T>(acc * inv);
    }
}

// out[n, C] for the queries of rows past .. past+n-1 of qkv[past + n, 3C].
template <class T>
void cached_attention(cudaStream_t stream, T* out, const T* qkv, int past, int n, int C, int NH) {
    const size_t shared = size_t(past + n) * sizeof(float);
    int limit = 0, device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (shared + 32 * sizeof(float) > size_t(limit))
        throw Error("text generation: a context of " + std::to_string(past + n) +
                    " positions is longer than the cached attention's shared memory holds");
    if (shared > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(cached_attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
    cached_attention_kernel<T><<<dim3(n, NH), kCachedAttentionThreads, shared, stream>>>(out, qkv, past, C, NH);
    LAUNCH_CHECK();
}

}  // namespace gpt::cuda
