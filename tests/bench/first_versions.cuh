// The first versions of stage 00's kernels, kept as lessons and as benchmark variants: the
// kernels "anyone writes first", one thread per row of LayerNorm and of the causal softmax, a
// classifier that reads each row of logits three times and gives the backward a thread a logit,
// and a GELU that gives each thread one element.
// The trainer never runs them; bench_stageNN times them beside the stage's own (--variants yes)
// and test_stageNN checks them against the CPU, so docs/00_fp32_baseline.md can show what
// coalescing is worth, measured in one run ("Predict, then measure").
//
// Included after the header of every stage (bench_stage.cu.in, test_stage.cu.in), which brings
// stage 00's files from the stage's own tree (in a workshop build, the copy with the exercises
// stubbed); the variants only apply where a stage still uses stage 00's op.
#pragma once
#include <cmath>
#include <tuple>

#include "attention_variants.h"
#include "row_variants.h"

// ---- LayerNorm: one thread per row -------------------------------------------------------------

namespace gpt::bench::first_versions {

// Each thread walks one row of C values: once for the mean, once for the variance, once to
// write the output. The 32 threads of a warp read 32 rows at once, addresses C apart: every load
// touches 32 sectors for 32 useful values, and N = 16384 rows make only 64 blocks of 256 threads.
template <class Act>
__global__ void layernorm_forward_thread_per_row_kernel(Act* out, float* mean, float* rstd, const Act* inp,
                                                        const Act* weight, const Act* bias, int N, int C) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const Act* x = inp + size_t(n) * C;
    float m = 0.0f;
    for (int c = 0; c < C; ++c) m += to_float(x[c]);
    m /= C;
    float var = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float d = to_float(x[c]) - m;
        var += d * d;
    }
    var /= C;
    const float s = rsqrtf(var + stage00::kLayerNormEps);
    Act* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = from_float<Act>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    mean[n] = m;
    rstd[n] = s;
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, one row per thread.
template <class Act>
__global__ void layernorm_backward_input_thread_per_row_kernel(Act* dinp, const Act* dout, const Act* inp,
                                                               const Act* weight, const float* mean,
                                                               const float* rstd, int N, int C) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const Act* x = inp + size_t(n) * C;
    const Act* d = dout + size_t(n) * C;
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
        const float g = to_float(d[c]) * to_float(weight[c]);
        g_mean += g;
        gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    Act* dx = dinp + size_t(n) * C;
    for (int c = 0; c < C; ++c) {
        const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
        const float g = to_float(d[c]) * to_float(weight[c]);
        dx[c] = from_float<Act>(to_float(dx[c]) + rstd[n] * (g - g_mean - xhat * gx_mean));
    }
}

// Stage 00's LayerNorm as first written: the kernels above, and the stage's own kernel for the
// weight and bias gradients (a thread per column, which was coalesced from the start).
struct LayerNormThreadPerRow {
    static constexpr const char* label = "first version: a thread per row";
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                        const Act* weight, const Act* bias, int N, int C) {
        if (N == 0) return;
        layernorm_forward_thread_per_row_kernel<<<cuda::ceil_div(N, 256), 256, 0, ctx.stream>>>(
            out, mean, rstd, inp, weight, bias, N, C);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        if (N == 0) return;
        layernorm_backward_input_thread_per_row_kernel<<<cuda::ceil_div(N, 256), 256, 0, ctx.stream>>>(
            dinp, dout, inp, weight, mean, rstd, N, C);
        LAUNCH_CHECK();
        const dim3 grid(cuda::ceil_div(C, 256), cuda::ceil_div(N, stage00::kRowsPerChunk));
        stage00::layernorm_backward_params_kernel<<<grid, 256, 0, ctx.stream>>>(dweight, dbias, dout, inp, mean, rstd,
                                                                                 N, C);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::bench::first_versions

template <>
struct gpt::bench::LayerNormVariants<gpt::stage00::LayerNorm> {
    using type = std::tuple<first_versions::LayerNormThreadPerRow>;
};


// ---- the causal softmax: one thread per row (in the materialised attention) ---------------------

// stages/00_fp32_baseline/attention.cuh's softmax as first written: a thread per row of T scores,
// so that the 32 threads of a warp read 32 rows, T·sizeof(Act) bytes apart, and every access of
// the warp touches 32 sectors. Three passes over the row (maximum, sum, write), then the zeros.
namespace gpt::bench::first_versions {

template <class Act>
__global__ void causal_softmax_forward_thread_per_row_kernel(Act* att, int rows, int T) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int t = r % T;
    Act* a = att + size_t(r) * T;
    float maxv = -INFINITY;
    for (int j = 0; j <= t; ++j) maxv = fmaxf(maxv, to_float(a[j]));
    float sum = 0.0f;
    for (int j = 0; j <= t; ++j) sum += expf(to_float(a[j]) - maxv);
    const float inv = 1.0f / sum;
    for (int j = 0; j <= t; ++j) a[j] = from_float<Act>(expf(to_float(a[j]) - maxv) * inv);
    for (int j = t + 1; j < T; ++j) a[j] = from_float<Act>(0.0f);
}

template <class Act>
__global__ void causal_softmax_backward_thread_per_row_kernel(Act* datt, const Act* att, int rows, int T) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const int t = r % T;
    const Act* a = att + size_t(r) * T;
    Act* d = datt + size_t(r) * T;
    float dot = 0.0f;
    for (int j = 0; j <= t; ++j) dot += to_float(a[j]) * to_float(d[j]);
    for (int j = 0; j <= t; ++j) d[j] = from_float<Act>(to_float(a[j]) * (to_float(d[j]) - dot));
    for (int j = t + 1; j < T; ++j) d[j] = from_float<Act>(0.0f);
}

struct ThreadPerRowSoftmax {
    template <class Act>
    static void forward(cudaStream_t stream, Act* att, int rows, int T) {
        if (rows == 0) return;
        causal_softmax_forward_thread_per_row_kernel<<<cuda::ceil_div(rows, 256), 256, 0, stream>>>(att, rows, T);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(cudaStream_t stream, Act* datt, const Act* att, int rows, int T) {
        if (rows == 0) return;
        causal_softmax_backward_thread_per_row_kernel<<<cuda::ceil_div(rows, 256), 256, 0, stream>>>(
            datt, att, rows, T);
        LAUNCH_CHECK();
    }
};

// Stage 00's materialised attention, the same batched products, with the softmax above.
struct MaterializedAttentionThreadPerRow : stage00::MaterializedAttentionWith<ThreadPerRowSoftmax> {
    static constexpr const char* label = "first version: softmax one thread per row";
    static constexpr const char* source = __FILE__;
};

}  // namespace gpt::bench::first_versions

template <>
struct gpt::bench::AttentionVariants<gpt::stage00::MaterializedAttention> {
    using type = std::tuple<first_versions::MaterializedAttentionThreadPerRow>;
};


// ---- the classifier -----------------------------------------------------------------------------

// stages/00_fp32_baseline/classifier.cuh as first written. The forward, a block per row, reads
// the row three times (maximum, sum, probabilities: 3 x 201 KB at V = 50257 in fp32) where the
// online softmax needs two; the backward gives each logit a thread and finds its row and column
// with a 64-bit division and remainder.
namespace gpt::bench::first_versions {

template <class Act>
__global__ void softmax_crossentropy_forward_three_passes_kernel(float* losses, float* probs, const Act* logits,
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
    if (threadIdx.x == 0) losses[n] = logf(sum) + maxv - to_float(l[targets[n]]);
}

template <class Act>
__global__ void softmax_crossentropy_backward_thread_per_logit_kernel(Act* dlogits, const float* probs,
                                                                      const int* targets, float dloss, int N, int V,
                                                                      int Vp) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= size_t(N) * Vp) return;
    const int v = i % Vp;
    const int n = i / Vp;
    const float d = v < V ? (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss : 0.0f;
    dlogits[i] = from_float<Act>(d);
}

// The stage's classifier (the same saved probabilities) with the kernels above.
struct SoftmaxCrossEntropyThreePasses : stage00::SoftmaxCrossEntropy {
    static constexpr const char* label = "first version: three passes over a row, a thread per logit in the backward";
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, float* losses, void* saved, const Act* logits, const int* targets,
                        int N, int V, int Vp, void*) {
        if (N == 0) return;
        softmax_crossentropy_forward_three_passes_kernel<<<N, stage00::kClassifierThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), logits, targets, V, Vp);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dlogits, const void* saved, const Act* /*logits*/,
                         const int* targets, float dloss, int N, int V, int Vp, void*) {
        const size_t n = size_t(N) * Vp;
        if (n == 0) return;
        softmax_crossentropy_backward_thread_per_logit_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(
            dlogits, static_cast<const float*>(saved), targets, dloss, N, V, Vp);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::bench::first_versions

template <>
struct gpt::bench::ClassifierVariants<gpt::stage00::SoftmaxCrossEntropy> {
    using type = std::tuple<first_versions::SoftmaxCrossEntropyThreePasses>;
};

// ---- GELU: one element a thread ------------------------------------------------------------------

// stages/00_fp32_baseline/elementwise.cuh's kernel with one element a thread instead of a 16-byte
// pack: every load coalesced, but 4 bytes (2 in bf16) in flight per thread where the pack has 16.
namespace gpt::bench::first_versions {

struct GeluElementPerThread {
    static constexpr const char* label = "first version: an element a thread";
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, size_t n) {
        stage00::elementwise<Act>(ctx.stream, out, inp, nullptr, n, stage00::GeluOf{}, /*packs=*/false);
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, const Act* inp, const Act* dout, size_t n) {
        stage00::elementwise(ctx.stream, dinp, inp, dout, n, stage00::GeluGradient{}, /*packs=*/false);
    }
};

}  // namespace gpt::bench::first_versions

template <>
struct gpt::bench::GeluVariants<gpt::stage00::Gelu> {
    using type = std::tuple<first_versions::GeluElementPerThread>;
};
