// The benchmark-only variants of stage 04's fused classifier (the ClassifierWithGrad slot, stages
// 04-06): candidates for a classifier at the copy bandwidth, timed beside the stage's
// (bench_stageNN --variants yes) and checked against the CPU as the stage's own
// (Slots.ClassifierWithGradBenchmarkVariants). None becomes the stage's until a GPU has measured
// it faster.
//
// The stage's kernel (stages/04_fused_kernels/classifier.cuh) reads each row twice, the second
// time mostly from L2, and per logit runs an accurate expf (about 8 instructions) behind a branch
// of the online maximum; on an H200 (2026-11-28, stage 05, B = 16) it moved 49 % of the copy
// bandwidth, 1.57 ms. The variant "row in registers":
//   - each thread loads its share of the row once, 16 bytes at a time, and keeps it in registers
//     (kPacks packs of 8 bf16: 28 or 52 registers);
//   - the maximum first, then Σ exp2(x·log2 e - max·log2 e): one FMA and one exp2 per logit, no
//     branch of an online maximum, no rescaling;
//   - the gradient from the registers, written over the row: one read and one write per logit
//     (4 bytes in bf16 against the stage's 6, counting the L2 re-read).
// Two shapes of block: 1024 threads of 7 packs and 512 threads of 13. Both hold one row an SM at a
// time (ptxas 13.0: 57-61 and 94-100 registers a thread), so an SM idles through each row's
// reductions; a row staged in shared memory instead would let two rows share an SM.
// Needs the stage's headers included first, as the other variant headers do: a workshop build
// compiles its own copies of them, and including the originals here would define stage 04 twice.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "row_variants.h"

namespace gpt::bench::classifier_variants {

using stage04::RowParts;
using stage04::row_parts;

// A row's bf16 logits are held as they arrive, two to a 32-bit word (a uint4 is 8 logits), and
// widened to float one at a time: 4 registers a pack. (Held as 8 separate bf16, as the stage's
// Pack16 declares them, ptxas for sm_90 gave each its own register and spilled.) Logit 2w of a
// pack is the low half of word w: little-endian.
constexpr int kLogitsPerPack = 8;
__device__ __forceinline__ unsigned word_of(const uint4& p, int i) {
    return i == 0 ? p.x : i == 1 ? p.y : i == 2 ? p.z : p.w;
}
__device__ __forceinline__ float logit_of(const uint4& p, int j) {
    const unsigned w = word_of(p, j / 2);
    return __uint_as_float(j % 2 ? w & 0xffff0000u : w << 16);  // a bf16 is a float's upper half
}
__device__ __forceinline__ unsigned bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }
__device__ __forceinline__ unsigned two_bf16(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }

template <int kThreads, int kPacks, class Columns>
__global__ void __launch_bounds__(kThreads)
    classifier_in_registers_kernel(float* losses, float* lse_out, bf16* dlogits, const bf16* logits,
                                   const int* targets, float dloss, int V, int Vp) {
    constexpr int K = kLogitsPerPack;
    constexpr float kLog2e = 1.4426950408889634f;
    __shared__ float shared[32];  // for cuda::block_max and block_sum
    const int n = blockIdx.x;
    const bf16* row = logits + size_t(n) * Vp;
    bf16* grad_row = dlogits + size_t(n) * Vp;  // may be `row` itself
    const int target = targets[n];
    const int columns = Columns::softmax_columns(V, Vp);  // the softmax reads [0, columns)
    const RowParts parts = row_parts(row, Vp);
    // Read before any thread writes the gradient over the row: block_max below waits for all.
    const float target_logit = to_float(row[target]);

    // This thread's logits: packs threadIdx.x + k·kThreads, and at most one of the ragged ends
    // (at most K - 1 columns before the first pack and K - 1 after the last).
    uint4 pack[kPacks];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
        const int i = threadIdx.x + k * kThreads;
        if (i < parts.packs) {
            pack[k] = reinterpret_cast<const uint4*>(row + parts.head)[i];
            const int past = columns - (parts.head + i * K);  // the pack's columns the softmax reads: min(K, past)
#pragma unroll
            for (int j = 0; j < K; ++j)
                if (j < past) m = fmaxf(m, logit_of(pack[k], j));
        }
    }
    const int t = threadIdx.x, ends = parts.head + (Vp - parts.tail);
    const int end_v = t < ends ? (t < parts.head ? t : parts.tail + t - parts.head) : -1;
    const float end_x = end_v >= 0 ? to_float(row[end_v]) : 0.0f;
    if (end_v >= 0 && end_v < columns) m = fmaxf(m, end_x);

    // The maximum first, then the sum: no rescaling as the maximum grows.
    const float max2 = cuda::block_max(m, shared) * kLog2e;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
        const int i = threadIdx.x + k * kThreads;
        if (i < parts.packs) {
            const int past = columns - (parts.head + i * K);
#pragma unroll
            for (int j = 0; j < K; ++j)
                if (j < past) s += exp2f(fmaf(logit_of(pack[k], j), kLog2e, -max2));
        }
    }
    if (end_v >= 0 && end_v < columns) s += exp2f(fmaf(end_x, kLog2e, -max2));
    const float sum = cuda::block_sum(s, shared);
    const float lse2 = max2 + log2f(sum);  // log2 Σ exp(x), then in natural units
    const float lse = lse2 / kLog2e;
    if (threadIdx.x == 0) {
        losses[n] = lse - target_logit;  // -log softmax, from the logit: never log(0)
        lse_out[n] = lse;
    }

    // softmax - onehot(target), from the registers, written over the row; 0 in columns that are
    // no token.
    const auto gradient = [&](int v, float x) {
        return Columns::is_token(v, V) ? (exp2f(fmaf(x, kLog2e, -lse2)) - (v == target ? 1.0f : 0.0f)) * dloss
                                       : 0.0f;
    };
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
        const int i = threadIdx.x + k * kThreads;
        if (i < parts.packs) {
            const int v0 = parts.head + i * K;
            const uint4 in = pack[k];
            pack[k] = {two_bf16(gradient(v0, logit_of(in, 0)), gradient(v0 + 1, logit_of(in, 1))),
                       two_bf16(gradient(v0 + 2, logit_of(in, 2)), gradient(v0 + 3, logit_of(in, 3))),
                       two_bf16(gradient(v0 + 4, logit_of(in, 4)), gradient(v0 + 5, logit_of(in, 5))),
                       two_bf16(gradient(v0 + 6, logit_of(in, 6)), gradient(v0 + 7, logit_of(in, 7)))};
            reinterpret_cast<uint4*>(grad_row + parts.head)[i] = pack[k];
        }
    }
    if (end_v >= 0) grad_row[end_v] = from_float<bf16>(gradient(end_v, end_x));
}

// The ClassifierWithGrad slot with the kernel above. Only the fused slot: the plain Classifier
// (validation losses, forward and backward apart) stays the stage's.
template <class Columns, int kThreads, int kPacks>
struct ClassifierInRegisters {
    static_assert(kThreads == 1024 || kThreads == 512, "the label names these two shapes");
    static constexpr const char* source = __FILE__;
    static constexpr const char* part = Columns::source;  // the op table names both files
    static constexpr bool kMasksPadding = Columns::kMasksPadding;
    static constexpr const char* label =
        kThreads == 1024 ? "row in registers, 1024 threads" : "row in registers, 512 threads";

    static size_t saved_bytes(size_t N, size_t, size_t) { return N * sizeof(float); }  // the lse
    static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }

    // bf16 rows only (stages 04-06); the other forward_backward below refuses the rest.
    static void forward_backward(CudaBackend::Context& ctx, float* losses, bf16* dlogits, const bf16* logits,
                                 const int* targets, float dloss, int N, int V, int Vp, void* saved, void*) {
        if (!kMasksPadding && V != Vp)
            throw Error("this classifier takes rows of V = " + std::to_string(V) + " tokens, not " +
                        std::to_string(Vp) + " padded columns");
        // Every pack of a row must fit in the registers, and the gradient's rows must sit like the
        // logits' against 16-byte boundaries (the graph writes the gradient over the logits).
        if (size_t(Vp) > size_t(kThreads) * kPacks * kLogitsPerPack)
            throw Error(std::string(label) + ": rows of " + std::to_string(Vp) + " columns do not fit " +
                        std::to_string(kPacks) + " packs a thread");
        if ((reinterpret_cast<uintptr_t>(dlogits) - reinterpret_cast<uintptr_t>(logits)) % 16 != 0)
            throw Error(std::string(label) + ": the gradient and the logits must sit alike against 16 bytes");
        if (N == 0) return;
        classifier_in_registers_kernel<kThreads, kPacks, Columns><<<N, kThreads, 0, ctx.stream>>>(
            losses, static_cast<float*>(saved), dlogits, logits, targets, dloss, V, Vp);
        LAUNCH_CHECK();
    }
    static void forward_backward(CudaBackend::Context&, float*, float*, const float*, const int*, float, int, int,
                                 int, void*, void*) {
        throw Error(std::string(label) + ": bf16 rows only");
    }
};

}  // namespace gpt::bench::classifier_variants

// Stage 04's classifier and stage 05's (the same kernel, its padded columns masked).
template <class Columns>
struct gpt::bench::ClassifierWithGradVariants<gpt::stage04::FusedClassifierOver<Columns>> {
    using type = std::tuple<classifier_variants::ClassifierInRegisters<Columns, 1024, 7>,
                            classifier_variants::ClassifierInRegisters<Columns, 512, 13>>;
};
