// Stage 00: causal self-attention as the textbook writes it, materialising the B x NH x T x T
// score matrix:
//     q, k, v  = split qkv[B,T,3C] into heads, each [B,NH,T,HS]
//     att      = softmax_causal(q · kᵀ / sqrt(HS))      [B,NH,T,T], saved for backward
//     y        = att · v                                 [B,NH,T,HS], merged back to [B,T,C]
// The two products are batched matmuls (one per batch and head); the softmax is a warp per
// row. Stage 03 replaces all of this with one fused kernel that never stores att.
#pragma once
#include <cfloat>
#include <cmath>

#include "cuda/backend.cuh"
#include "cuda/reduce.cuh"
#include "elementwise.cuh"  // packs of 16 bytes

namespace gpt::stage00 {

// Element i of a [B,NH,T,HS] head tensor is element (b, t, h*HS + d) of the [B,T,(NH,HS)] rows
// of a projection; this is its offset there, for rows row_stride apart.
__device__ inline size_t row_offset_of_head_element(size_t i, int row_stride, int T, int NH, int HS) {
    const int d = i % HS;
    const int t = (i / HS) % T;
    const int h = (i / (size_t(HS) * T)) % NH;
    const size_t b = i / (size_t(HS) * T * NH);
    return (b * T + t) * row_stride + h * HS + d;
}

// Rows to heads (splitting q, k, v out of qkv) or heads to rows (merging the heads' outputs, or
// dq, dk, dv into dqkv), a 16-byte pack a thread (elementwise.cuh says why). HS % kVec == 0: a
// pack never straddles two heads.
template <bool kToHeads, int kVec, class Act>
__global__ void copy_heads_kernel(Act* dst, const Act* src, int row_stride, int B, int T, int NH, int HS) {
    using P = Pack<Act, kVec>;
    // The pack's first element, in the heads.
    const size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * kVec;
    if (i >= size_t(B) * NH * T * HS) return;
    const size_t row = row_offset_of_head_element(i, row_stride, T, NH, HS);
    if constexpr (kToHeads) store_pack(dst + i, 0, load_pack<P>(src + row, 0));
    else store_pack(dst + row, 0, load_pack<P>(src + i, 0));
}

template <bool kToHeads, class Act>
void copy_heads(cudaStream_t stream, Act* dst, const Act* src, int row_stride, int B, int T, int NH, int HS) {
    const size_t n = size_t(B) * NH * T * HS;
    if (n == 0) return;
    constexpr int kVec = kPackElements<Act>;
    if (HS % kVec == 0 && row_stride % kVec == 0 && aligned16(dst) && aligned16(src))
        copy_heads_kernel<kToHeads, kVec><<<element_blocks(n, kVec), kElementThreads, 0, stream>>>(
            dst, src, row_stride, B, T, NH, HS);
    else
        copy_heads_kernel<kToHeads, 1><<<element_blocks(n, 1), kElementThreads, 0, stream>>>(dst, src, row_stride, B,
                                                                                             T, NH, HS);
    LAUNCH_CHECK();
}

// ---- the causal softmax: a warp per row ---------------------------------------------------------
// The first version anyone writes gives each row to one thread (tests/bench/first_versions.cuh
// keeps it, as a benchmark variant): neighbouring threads then read addresses T apart and every
// load touches a different 32-byte sector. Here the 32 lanes of a warp share a row and read it
// side by side, so each load of the warp is one contiguous stretch. Both kernels are
// memory-bound: each reads its rows' lower triangle twice (the second time mostly from the L1 or
// L2 cache: a row is 4 KiB at T = 1024 in fp32) and writes the whole square.

constexpr int kSoftmaxWarps = 8;  // warps per block: rows per block

// In place on row r = (b, h, t) of the scores: row t keeps columns 0..t (the past and itself),
// softmax over them in float, and zeros above the diagonal so that att · v can be one ordinary
// matmul over all T columns. The maximum and the sum come from one pass (the online softmax:
// each lane keeps its running maximum m and s = sum exp(x - m), rescaled when m grows).
template <class Act>
__global__ void __launch_bounds__(32 * kSoftmaxWarps) causal_softmax_forward_kernel(Act* att, int rows, int T) {
    const int r = blockIdx.x * kSoftmaxWarps + threadIdx.x / 32;
    if (r >= rows) return;  // the whole warp: the shuffles below need all 32 lanes
    const int lane = threadIdx.x % 32, t = r % T;
    Act* a = att + size_t(r) * T;
    float m = -FLT_MAX, s = 0.0f;  // the lane's maximum and sum (cuda::online_max_sum_add)
#pragma unroll 4  // 4 loads in flight, not one: the body has no branch that would keep them apart
    for (int j = lane; j <= t; j += 32) cuda::online_max_sum_add(m, s, to_float(a[j]));
    // Each lane's sum rescaled to the row's maximum; a lane that saw no score (t < 31) adds 0.
    const float row_max = cuda::warp_max(m);
    const float inv = 1.0f / cuda::warp_sum(s * expf(m - row_max));
    for (int j = lane; j <= t; j += 32) a[j] = from_float<Act>(expf(to_float(a[j]) - row_max) * inv);
    for (int j = t + 1 + lane; j < T; j += 32) a[j] = from_float<Act>(0.0f);
}

// d(scores) = att * (d(att) - sum_j att_j * d(att)_j), in place over d(att); zero above the
// diagonal (those scores were masked, they get no gradient). datt and att are never the same
// memory: __restrict__ lets the compiler move the second pass's loads ahead of its stores.
template <class Act>
__global__ void __launch_bounds__(32 * kSoftmaxWarps)
    causal_softmax_backward_kernel(Act* __restrict__ datt, const Act* __restrict__ att, int rows, int T) {
    const int r = blockIdx.x * kSoftmaxWarps + threadIdx.x / 32;
    if (r >= rows) return;  // the whole warp: warp_sum needs all 32 lanes
    const int lane = threadIdx.x % 32, t = r % T;
    const Act* a = att + size_t(r) * T;
    Act* d = datt + size_t(r) * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += to_float(a[j]) * to_float(d[j]);
    dot = cuda::warp_sum(dot);
    for (int j = lane; j <= t; j += 32) d[j] = from_float<Act>(to_float(a[j]) * (to_float(d[j]) - dot));
    for (int j = t + 1 + lane; j < T; j += 32) d[j] = from_float<Act>(0.0f);
}

// The launches, for MaterializedAttentionWith below: rows = B·NH·T rows of T scores.
struct WarpPerRowSoftmax {
    template <class Act>
    static void forward(cudaStream_t stream, Act* att, int rows, int T) {
        if (rows == 0) return;  // a grid of no blocks is a launch error
        causal_softmax_forward_kernel<<<cuda::ceil_div(rows, kSoftmaxWarps), 32 * kSoftmaxWarps, 0, stream>>>(
            att, rows, T);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(cudaStream_t stream, Act* datt, const Act* att, int rows, int T) {
        if (rows == 0) return;
        causal_softmax_backward_kernel<<<cuda::ceil_div(rows, kSoftmaxWarps), 32 * kSoftmaxWarps, 0, stream>>>(
            datt, att, rows, T);
        LAUNCH_CHECK();
    }
};

// The two products run with the stage's matmul arithmetic (ctx.matmul_compute), like Matmul.
// `Softmax` launches the causal softmax (WarpPerRowSoftmax; the benchmark also runs the first
// version, one thread per row).
template <class Softmax>
struct MaterializedAttentionWith {
    // Saved for backward: att, B x NH x T x T.
    static size_t saved_bytes(size_t B, size_t T, size_t, size_t NH, size_t act_bytes) {
        return B * NH * T * T * act_bytes;
    }
    // Scratch: q, k, v, then y (forward) or dy, dq, dk, dv (backward), B·T·C each, and
    // d(att), B·NH·T·T.
    static size_t scratch_bytes(size_t B, size_t T, size_t C, size_t NH, size_t act_bytes) {
        return (7 * B * T * C + B * NH * T * T) * act_bytes;
    }

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, void* saved, const Act* qkv, int B, int T, int C, int NH,
                        void* scratch) {
        const int HS = C / NH;
        const size_t n = size_t(B) * T * C;
        const cublasComputeType_t math = ctx.matmul_compute;
        Act* att = static_cast<Act*>(saved);
        Act *q = static_cast<Act*>(scratch), *k = q + n, *v = k + n, *y = v + n;
        split(ctx, q, k, v, qkv, B, T, C, NH);
        // scores = q · kᵀ / sqrt(HS): one T x T product per (batch, head)
        const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
        ctx.gemm.gemm(ctx.stream, math, false, true, T, T, HS, scale, q, HS, k, HS, 0.0f, att, T, B * NH,
                      (long long)T * HS, (long long)T * HS, (long long)T * T);
        const int rows = B * NH * T;
        Softmax::forward(ctx.stream, att, rows, T);
        ctx.gemm.gemm(ctx.stream, math, false, false, T, HS, T, 1.0f, att, T, v, HS, 0.0f, y, HS, B * NH,
                      (long long)T * T, (long long)T * HS, (long long)T * HS);
        copy_heads<false>(ctx.stream, out, y, C, B, T, NH, HS);
    }

    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dqkv, const Act* dout, const Act* qkv, const Act* /*out*/,
                         const void* saved, int B, int T, int C, int NH, void* scratch) {
        const int HS = C / NH;
        const size_t n = size_t(B) * T * C;
        const cublasComputeType_t math = ctx.matmul_compute;
        const Act* att = static_cast<const Act*>(saved);
        Act *q = static_cast<Act*>(scratch), *k = q + n, *v = k + n, *dy = v + n;  // dy takes y's place
        Act *dq = dy + n, *dk = dq + n, *dv = dk + n, *datt = dv + n;
        split(ctx, q, k, v, qkv, B, T, C, NH);  // cheaper to redo than to keep for every layer
        copy_heads<true>(ctx.stream, dy, dout, C, B, T, NH, HS);
        const long long tt = (long long)T * T, th = (long long)T * HS;
        // through y = att · v
        ctx.gemm.gemm(ctx.stream, math, false, true, T, T, HS, 1.0f, dy, HS, v, HS, 0.0f, datt, T, B * NH, th, th, tt);
        ctx.gemm.gemm(ctx.stream, math, true, false, T, HS, T, 1.0f, att, T, dy, HS, 0.0f, dv, HS, B * NH, tt, th, th);
        // through the softmax
        const int rows = B * NH * T;
        Softmax::backward(ctx.stream, datt, att, rows, T);
        // through scores = q · kᵀ · scale
        const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
        ctx.gemm.gemm(ctx.stream, math, false, false, T, HS, T, scale, datt, T, k, HS, 0.0f, dq, HS, B * NH, tt, th, th);
        ctx.gemm.gemm(ctx.stream, math, true, false, T, HS, T, scale, datt, T, q, HS, 0.0f, dk, HS, B * NH, tt, th, th);
        for (int part = 0; part < 3; ++part) {
            const Act* src = part == 0 ? dq : part == 1 ? dk : dv;
            copy_heads<false>(ctx.stream, dqkv + part * C, src, 3 * C, B, T, NH, HS);
        }
    }

  private:
    template <class Act>
    static void split(CudaBackend::Context& ctx, Act* q, Act* k, Act* v, const Act* qkv, int B, int T, int C, int NH) {
        Act* parts[3] = {q, k, v};
        for (int part = 0; part < 3; ++part)
            copy_heads<true>(ctx.stream, parts[part], qkv + part * C, 3 * C, B, T, NH, C / NH);
    }
};

struct MaterializedAttention : MaterializedAttentionWith<WarpPerRowSoftmax> {
    static constexpr const char* source = __FILE__;
};

}  // namespace gpt::stage00
