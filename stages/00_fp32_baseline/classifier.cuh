// Stage 00: softmax with cross-entropy over the vocabulary. The forward saves the
// probabilities (N x Vp floats) for the backward, which is then one subtraction per logit.
// Padded vocabulary columns (Vp > V, stage 05) are outside the softmax and get no gradient.
#pragma once
#include "cuda/backend.cuh"

namespace gpt::stage00 {

// One block per row: a row holds 50257 logits, far too many for one thread.
constexpr int kClassifierThreads = 512;

template <class Act>
__global__ void softmax_crossentropy_forward_kernel(float* losses, float* probs, const Act* logits,
                                                    const int* targets, int V, int Vp) {
    __shared__ float shared[32];
    const int n = blockIdx.x;
    const Act* l = logits + size_t(n) * Vp;
    float* p = probs + size_t(n) * Vp;
    float maxv = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, to_float(l[v]));
    maxv = cuda::block_max(maxv, shared);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(to_float(l[v]) - maxv);
    sum = cuda::block_sum(sum, shared);
    const float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) p[v] = v < V ? expf(to_float(l[v]) - maxv) * inv : 0.0f;
    // -log softmax from the logits (not log of a probability that may have underflowed to 0)
    if (threadIdx.x == 0) losses[n] = logf(sum) + maxv - to_float(l[targets[n]]);
}

// dlogits = (probs - onehot(target)) * dloss, one thread per logit.
template <class Act>
__global__ void softmax_crossentropy_backward_kernel(Act* dlogits, const float* probs, const int* targets,
                                                     float dloss, int N, int V, int Vp) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= size_t(N) * Vp) return;
    const int v = i % Vp;
    const int n = i / Vp;
    const float d = v < V ? (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss : 0.0f;
    dlogits[i] = from_float<Act>(d);
}

struct SoftmaxCrossEntropy {
    static constexpr const char* source = __FILE__;

    static size_t saved_bytes(size_t N, size_t Vp, size_t) { return N * Vp * sizeof(float); }
    static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }

    template <class Act>
    static void forward(CudaBackend::Context& ctx, float* losses, void* saved, const Act* logits, const int* targets,
                        int N, int V, int Vp, void*) {
        softmax_crossentropy_forward_kernel<<<N, kClassifierThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), logits, targets, V, Vp);
        LAUNCH_CHECK();
    }
    // `logits` is not read: the probabilities were saved. (Stage 04 saves one number per row and
    // recomputes them from the logits.)
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dlogits, const void* saved, const Act* /*logits*/,
                         const int* targets, float dloss, int N, int V, int Vp, void*) {
        const size_t n = size_t(N) * Vp;
        softmax_crossentropy_backward_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(
            dlogits, static_cast<const float*>(saved), targets, dloss, N, V, Vp);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
