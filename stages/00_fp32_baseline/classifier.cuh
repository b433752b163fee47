// Stage 00: softmax with cross-entropy over the vocabulary. The forward saves the
// probabilities (N x Vp floats) for the backward, which is then one subtraction per logit.
// Padded vocabulary columns (Vp > V, stage 05) are outside the softmax and get no gradient.
#pragma once
#include <cfloat>
#include <cmath>

#include "cuda/backend.cuh"
#include "cuda/reduce.cuh"

namespace gpt::stage00 {

// One block per row: a row holds 50257 logits, far too many for one thread.
constexpr int kClassifierThreads = 512;
// The backward: a block per row and per slice of kClassifierColumns columns (25 slices of a
// row of 50257), each thread 4 of them, kClassifierThreads apart.
constexpr int kClassifierColumns = 4 * kClassifierThreads;

// The block's threads share the row, side by side. Two passes: the maximum and the sum
// together (the online softmax: each thread keeps its running maximum m and s = sum exp(x - m),
// rescaled when m grows), then the probabilities. Unrolled by 4, so that a thread has 4 loads in
// flight, not one (probs and logits are never the same memory: __restrict__ lets the compiler
// move pass 2's loads ahead of its stores).
template <class Act>
__global__ void __launch_bounds__(kClassifierThreads)
    softmax_crossentropy_forward_kernel(float* losses, float* __restrict__ probs, const Act* __restrict__ logits,
                                        const int* targets, int V, int Vp) {
    __shared__ float shared[32];  // for cuda::block_max and block_sum
    const int n = blockIdx.x;
    const Act* l = logits + size_t(n) * Vp;
    float* p = probs + size_t(n) * Vp;
    float m = -FLT_MAX, s = 0.0f;  // the thread's maximum and sum (cuda::online_max_sum_add)
#pragma unroll 4
    for (int v = threadIdx.x; v < V; v += kClassifierThreads) cuda::online_max_sum_add(m, s, to_float(l[v]));
    // The threads' sums, each rescaled to the row's maximum; a thread that saw no logit adds 0.
    const float maxv = cuda::block_max(m, shared);
    const float sum = cuda::block_sum(s * expf(m - maxv), shared);
    const float inv = 1.0f / sum;
#pragma unroll 4
    for (int v = threadIdx.x; v < V; v += kClassifierThreads) p[v] = expf(to_float(l[v]) - maxv) * inv;
    for (int v = V + threadIdx.x; v < Vp; v += kClassifierThreads) p[v] = 0.0f;  // padded columns
    // -log softmax from the logits (not log of a probability that may have underflowed to 0)
    if (threadIdx.x == 0) losses[n] = logf(sum) + maxv - to_float(l[targets[n]]);
}

// dlogits = (probs - onehot(target)) * dloss over row blockIdx.x, columns of slice blockIdx.y.
// Rows on x: gridDim.x may be 2^31 - 1, gridDim.y only 65535 (B·T = 65536 rows at B = 64).
template <class Act>
__global__ void __launch_bounds__(kClassifierThreads)
    softmax_crossentropy_backward_kernel(Act* dlogits, const float* probs, const int* targets, float dloss, int V,
                                         int Vp) {
    constexpr int kPerThread = kClassifierColumns / kClassifierThreads;
    const int n = blockIdx.x, target = targets[n];
    const size_t row = size_t(n) * Vp;
    const int v0 = blockIdx.y * kClassifierColumns + threadIdx.x;
    // All the thread's loads first, then the stores: kPerThread loads in flight, not one at a
    // time (a store to dlogits could otherwise be the next load's address, for all the compiler knows).
    float p[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int v = v0 + k * kClassifierThreads;
        p[k] = v < Vp ? probs[row + v] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        const int v = v0 + k * kClassifierThreads;
        if (v < Vp) dlogits[row + v] = from_float<Act>(v < V ? (p[k] - (v == target ? 1.0f : 0.0f)) * dloss : 0.0f);
    }
}

struct SoftmaxCrossEntropy {
    static constexpr const char* source = __FILE__;

    static size_t saved_bytes(size_t N, size_t Vp, size_t) { return N * Vp * sizeof(float); }
    static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }

    template <class Act>
    static void forward(CudaBackend::Context& ctx, float* losses, void* saved, const Act* logits, const int* targets,
                        int N, int V, int Vp, void*) {
        if (N == 0) return;  // a grid of no blocks is a launch error
        softmax_crossentropy_forward_kernel<<<N, kClassifierThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), logits, targets, V, Vp);
        LAUNCH_CHECK();
    }
    // `logits` is not read: the probabilities were saved. (Stage 04 saves one number per row and
    // recomputes them from the logits.)
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dlogits, const void* saved, const Act* /*logits*/,
                         const int* targets, float dloss, int N, int V, int Vp, void*) {
        if (N == 0 || Vp == 0) return;
        const dim3 grid(N, cuda::ceil_div(Vp, kClassifierColumns));
        softmax_crossentropy_backward_kernel<<<grid, kClassifierThreads, 0, ctx.stream>>>(
            dlogits, static_cast<const float*>(saved), targets, dloss, V, Vp);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
