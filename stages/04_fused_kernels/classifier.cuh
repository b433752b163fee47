// Stage 04: softmax, cross-entropy and the gradient of the logits in one kernel, one block per row.
// Stage 00 saved the probabilities (N x Vp floats: 3.1 GiB at 16 x 1024 tokens of GPT-2) and read
// them back in a second kernel. Here a block reads its row once for the maximum and the sum (an
// online softmax: a running maximum, the sum rescaled whenever it grows), keeps the log-sum-exp
// (one float per row) and reads the row again to write the gradient over it:
//
//   bytes per logit, bf16   stage 00: 2 reads (max and sum, probs) + fp32 probs written and read
//                                     back + the gradient: 4 + 4 + 4 + 2 = 14 B, 2 launches
//                           stage 04: 2 reads + the gradient: 4 + 2 = 6 B (the second read is
//                                     mostly from L2), 1 launch, no probability buffer
//
// The same kernel, with one of its halves switched off, is also the plain forward (validation
// losses) and the plain backward (from the saved log-sum-exp).
// PyTorch equivalent: F.cross_entropy(logits, targets) and its backward; Liger Kernel's
// cross-entropy fuses them the same way, writing the gradient over the logits.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/backend.cuh"
#include "cuda/exercise.cuh"
#include "cuda/reduce.cuh"
#include "util/error.h"

namespace gpt::stage04 {

// A row of 50257 logits is 49 per thread: few enough for registers, enough per load.
constexpr int kFusedClassifierThreads = 1024;

// 16 bytes of a row (8 bf16 or 4 floats) move as one load or store instead of 8 or 4.
template <class Act>
constexpr int kPackSize = 16 / sizeof(Act);
template <class Act>
using Pack16 = Pack<Act, kPackSize<Act>>;

// A row in three parts, so that the middle can move 16 bytes at a time: [0, head) up to the
// first 16-byte boundary, then `packs` packs, then [tail, n). With Vp = 50257 the rows of bf16
// logits start at every possible alignment, so the head and tail are not empty in general.
struct RowParts {
    int head, packs, tail;
};

template <class Act>
__device__ inline RowParts row_parts(const Act* row, int n) {
    constexpr int K = kPackSize<Act>;
    const int misaligned = int(reinterpret_cast<uintptr_t>(row) % 16 / sizeof(Act));  // elements past a boundary
    const int head = min((K - misaligned) % K, n);
    const int packs = (n - head) / K;
    return {head, packs, head + packs * K};
}

// Calls f(v, row[v] in float) for every v in [0, n); the threads of the block share the row.
template <class Act, class F>
__device__ inline void for_each_logit(const Act* row, int n, F&& f) {
    constexpr int K = kPackSize<Act>;
    const RowParts parts = row_parts(row, n);
    for (int v = threadIdx.x; v < parts.head; v += blockDim.x) f(v, to_float(row[v]));
    for (int i = threadIdx.x; i < parts.packs; i += blockDim.x) {
        const auto in = load_pack<Pack16<Act>>(row + parts.head, i);
#pragma unroll
        for (int k = 0; k < K; ++k) f(parts.head + i * K + k, to_float(in.v[k]));
    }
    for (int v = parts.tail + threadIdx.x; v < n; v += blockDim.x) f(v, to_float(row[v]));
}

// dst[v] = f(v, src[v] in float) for every v in [0, n). dst may be src: each element is read and
// written by the same thread. Rows that sit differently against 16-byte boundaries (never the
// case in the graph) go one element at a time.
template <class Act, class F>
__device__ inline void transform_row(Act* dst, const Act* src, int n, F&& f) {
    constexpr int K = kPackSize<Act>;
    const bool same_alignment = (reinterpret_cast<uintptr_t>(src) - reinterpret_cast<uintptr_t>(dst)) % 16 == 0;
    const RowParts parts = same_alignment ? row_parts(dst, n) : RowParts{n, 0, n};
    for (int v = threadIdx.x; v < parts.head; v += blockDim.x) dst[v] = from_float<Act>(f(v, to_float(src[v])));
    for (int i = threadIdx.x; i < parts.packs; i += blockDim.x) {
        const auto in = load_pack<Pack16<Act>>(src + parts.head, i);
        Pack16<Act> out;
#pragma unroll
        for (int k = 0; k < K; ++k) out.v[k] = from_float<Act>(f(parts.head + i * K + k, to_float(in.v[k])));
        store_pack(dst + parts.head, i, out);
    }
    for (int v = parts.tail + threadIdx.x; v < n; v += blockDim.x) dst[v] = from_float<Act>(f(v, to_float(src[v])));
}

// Which columns of a row of logits are tokens. Stage 04's vocabulary is not padded (V == Vp):
// all of them. Stage 05 pads it and masks the padding (stages/05_vocab_padding/padded_columns.cuh).
struct EveryColumnIsAToken {
    static constexpr const char* source = __FILE__;
    static constexpr bool kMasksPadding = false;  // rows must have V == Vp
    __device__ static int softmax_columns(int, int Vp) { return Vp; }
    __device__ static bool is_token(int, int) { return true; }
};

// One block per row n. kForward: losses[n] and lse_out[n] = log Σ exp(logit) over the columns
// the softmax reads (Columns::softmax_columns). kBackward: the gradient over the row's Vp
// columns, from that lse (or, without kForward, from lse_in[n]); 0 where Columns::is_token says
// a column is none. Both: the fused slot.
template <class Act, bool kForward, bool kBackward, class Columns>
__global__ void __launch_bounds__(kFusedClassifierThreads)
    fused_classifier_kernel(float* losses, float* lse_out, Act* dlogits, const float* lse_in, const Act* logits,
                            const int* targets, float dloss, int V, int Vp) {
    static_assert(kForward || kBackward, "nothing to do");
    // What the exercise below uses ([[maybe_unused]]: while it is a stub, nothing does).
    [[maybe_unused]] __shared__ float shared[32];  // for cuda::block_max and block_sum
    const int n = blockIdx.x;
    const Act* row = logits + size_t(n) * Vp;
    Act* grad_row = kBackward ? dlogits + size_t(n) * Vp : nullptr;  // may be `row` itself
    [[maybe_unused]] const int target = targets[n];
    // EXERCISE BEGIN stage04.fused_classifier TESTS Kernels.ClassifierForward|Kernels.ClassifierBackward|Slots.ClassifierWithGrad|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.GradientAccumulation|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero
    float lse;
    if constexpr (kForward) {
        // Read before any thread can write the gradient over it: block_max below waits for all.
        const float target_logit = to_float(row[target]);
        // Each thread: its running maximum m and s = Σ exp(x - m) over the logits it has seen.
        float m = -INFINITY, s = 0.0f;
        for_each_logit(row, Columns::softmax_columns(V, Vp), [&](int, float x) {
            if (x > m) {
                s = s * expf(m - x) + 1.0f;  // the sum so far in terms of the new maximum (0 at first)
                m = x;
            } else {
                s += expf(x - m);
            }
        });
        // The threads' sums, each rescaled to the row's maximum, add up to the row's sum. A thread
        // that saw no logit has m = -inf and s = 0, and adds 0.
        const float row_max = cuda::block_max(m, shared);
        const float sum = cuda::block_sum(s * expf(m - row_max), shared);
        lse = row_max + logf(sum);
        if (threadIdx.x == 0) {
            losses[n] = lse - target_logit;  // -log softmax, from the logit: never log(0)
            lse_out[n] = lse;
        }
    } else {
        lse = lse_in[n];
    }
    if constexpr (kBackward) {
        // softmax - onehot(target), written over the logits; exp(x - lse) is the probability.
        transform_row(grad_row, row, Vp, [&](int v, float x) {
            return Columns::is_token(v, V) ? (expf(x - lse) - (v == target ? 1.0f : 0.0f)) * dloss : 0.0f;
        });
    }
    // EXERCISE END
}

// The classifier over rows whose columns are told apart by `Columns` (stage 04: all tokens).
template <class Columns>
struct FusedClassifierOver {
    static constexpr const char* source = __FILE__;
    static constexpr const char* part = Columns::source;  // the op table names both files
    static constexpr bool kMasksPadding = Columns::kMasksPadding;

    // Saved for backward: one log-sum-exp per row (stage 00: every probability).
    static size_t saved_bytes(size_t N, size_t, size_t) { return N * sizeof(float); }
    static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }

    // losses[n] = lse[n] - logits[n, target]; saved: lse, N floats.
    template <class Act>
    static void forward(CudaBackend::Context& ctx, float* losses, void* saved, const Act* logits, const int* targets,
                        int N, int V, int Vp, void*) {
        check_columns(V, Vp);
        fused_classifier_kernel<Act, true, false, Columns><<<N, kFusedClassifierThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), nullptr, nullptr, logits, targets, 0.0f, V, Vp);
        LAUNCH_CHECK();
    }

    // dlogits = (exp(logits - lse) - onehot(target)) * dloss, 0 in columns that are no token;
    // dlogits may be the logits' own memory.
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dlogits, const void* saved, const Act* logits,
                         const int* targets, float dloss, int N, int V, int Vp, void*) {
        check_columns(V, Vp);
        fused_classifier_kernel<Act, false, true, Columns><<<N, kFusedClassifierThreads, 0, ctx.stream>>>(
            nullptr, nullptr, dlogits, static_cast<const float*>(saved), logits, targets, dloss, V, Vp);
        LAUNCH_CHECK();
    }

    // The ClassifierWithGrad slot: both in one launch. saved gets the lse too, so that backward()
    // can follow.
    template <class Act>
    static void forward_backward(CudaBackend::Context& ctx, float* losses, Act* dlogits, const Act* logits,
                                 const int* targets, float dloss, int N, int V, int Vp, void* saved, void*) {
        check_columns(V, Vp);
        fused_classifier_kernel<Act, true, true, Columns><<<N, kFusedClassifierThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), dlogits, nullptr, logits, targets, dloss, V, Vp);
        LAUNCH_CHECK();
    }

  private:
    // Padded columns would enter the softmax as if they were words: refuse them.
    static void check_columns(int V, int Vp) {
        if (!kMasksPadding && V != Vp)
            throw Error("this classifier takes rows of V = " + std::to_string(V) + " tokens, not " +
                        std::to_string(Vp) + " padded columns (stage 05 masks the padding)");
    }
};

using FusedClassifier = FusedClassifierOver<EveryColumnIsAToken>;

}  // namespace gpt::stage04
