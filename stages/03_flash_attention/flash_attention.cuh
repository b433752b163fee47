// Stage 03: causal self-attention as one fused kernel per pass, FlashAttention-2's design.
//
// Stage 02 wrote the B x NH x T x T probabilities to memory and read them back three times.
// Here a block of 128 queries keeps its queries in registers and walks over the keys 64 at a
// time: scores of one tile on the tensor cores, the online softmax (a running maximum and sum per
// row, the partial output rescaled whenever the maximum grows), then the tile's probabilities
// times V, straight from registers. Nothing of size T x T exists anywhere. The forward pass saves
// one number per row, the log-sum-exp of its scores; the backward pass recomputes every
// probability from it instead of reading them.
//
//   forward   flash_forward_kernel        out, lse      <- q, k, v              (one block: 128 queries)
//   backward  flash_row_dot_kernel        D = rowsum(dout * out)
//             flash_backward_dkdv_kernel  dk, dv        <- q, k, v, dout, lse, D  (one block: 64 keys)
//             flash_backward_dq_kernel    dq            <- q, k, v, dout, lse, D  (one block: 64 queries)
//
// What makes it fast (docs/03b_flash_attention_tensor_cores.md, "What makes the kernels fast",
// counts each):
// - 32 query rows per warp: every k and v operand read from shared memory feeds two products;
// - k and v arrive in separate cp.async groups, two buffers each: the scores of tile j start as
//   soon as its k is there, while its v and the next k are still on their way;
// - only the tiles on the diagonal carry the causal mask: it is a template parameter, and the
//   other tiles' code has no select at all; a warp skips the tiles after its last query;
// - the softmax scale is folded into the exponent: 2^(s·log2(e)/sqrt(HS) − m), one FFMA per score;
// - the backward makes dq in a pass of its own (7 products per pair of tiles, not
//   FlashAttention-2's 5): no atomic additions, no fp32 sums of dq, the same bits on every run, and
//   this design (with an earlier dq kernel) was faster in the three runs that timed both (the
//   chapter's item 5).
//
// The kernels read q, k and v where the QKV projection wrote them (rows of 3C, head h at column
// h·HS of each third) and write out and dqkv in the same row layout, so no permute is needed.
// Matrix products are mma.sync.m16n8k16 (bf16 operands, fp32 sums; sm_80 and later), operands
// moved from shared memory to registers with ldmatrix (tensor_cores.cuh). The chapter draws the
// tiles (docs/figures/attention_tiles.svg) and the fragments (mma_fragments.svg).
//
// PyTorch equivalent: F.scaled_dot_product_attention(q, k, v, is_causal=True)
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/backend.cuh"
#include "cuda/exercise.cuh"
#include "cuda/reduce.cuh"
#include "tensor_cores.cuh"
#include "util/error.h"

namespace gpt::stage03 {

constexpr int kQueryRows = 128;       // queries per forward block
constexpr int kTile = 64;             // keys or queries per tile
constexpr int kTileCols = kTile / 8;  // 8-wide column tiles of a row group's 64 scores
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- products on a warp's rows -----------------------------------------------------------------
//
// A warp owns kM groups of 16 rows (the m of the mma): kM = 2 in the forward (32 queries), 1 in
// the backward (16 keys or 16 queries). Each B operand is loaded from shared memory once and used by all kM
// groups: that is what 32 rows per warp saves.

// Row of accumulator element e (0..3) within its 16-row group, and column of element e of 8-column
// tile n, for this thread (g = lane / 4, c = lane % 4).
__device__ inline int lane_row(int e) { return (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ inline int lane_col(int n, int e) { return n * 8 + (threadIdx.x % 4) * 2 + (e & 1); }

// Rows row0..row0 + 16·kM − 1 of a shared tile as A operands, kept in registers (the queries in
// the forward; the keys and values in the dk/dv kernel; the queries and dout in the dq kernel).
template <int HS, int kM>
__device__ inline void load_warp_rows(uint32_t (&a)[kM][HS / 16][4], const bf16* tile, int row0) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int d = 0; d < HS / 16; ++d) load_a<HS + kPad>(a[m][d], tile, row0 + 16 * m, d * 16);
}

// acc[16kM x 64] = A[16kM x HS] · tileᵀ, tile[64][HS]: the scores q·kᵀ (and in the backward k·qᵀ,
// v·doutᵀ, dout·vᵀ).
template <int HS, int kM>
__device__ inline void mma_rows_by_tile_transposed(float (&acc)[kM][kTileCols][4], const uint32_t (&a)[kM][HS / 16][4],
                                                   const bf16* tile) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int n = 0; n < kTileCols; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < HS / 16; ++k)
#pragma unroll
        for (int n = 0; n < kTileCols; n += 2) {
            uint32_t b[4];
            load_b_transposed<HS + kPad>(b, tile, n * 8, k * 16);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                mma_bf16(acc[m][n], a[m][k], b[0], b[1]);
                mma_bf16(acc[m][n + 1], a[m][k], b[2], b[3]);
            }
        }
}

// The A operand of columns 16k..16k+15 of a 16 x 64 accumulator, rounded to bf16.
__device__ inline void a_from_accumulators(uint32_t (&a)[4], const float (&acc)[kTileCols][4], int k) {
    a[0] = pack_bf16(acc[2 * k][0], acc[2 * k][1]);
    a[1] = pack_bf16(acc[2 * k][2], acc[2 * k][3]);
    a[2] = pack_bf16(acc[2 * k + 1][0], acc[2 * k + 1][1]);
    a[3] = pack_bf16(acc[2 * k + 1][2], acc[2 * k + 1][3]);
}

// out[16kM x HS] += P[16kM x 64] · tile, tile[64][HS]: p·v (and in the backward pᵀ·dout, dsᵀ·q,
// ds·k).
template <int HS, int kM>
__device__ inline void mma_accumulators_by_tile(float (&out)[kM][HS / 8][4], const float (&p)[kM][kTileCols][4],
                                                const bf16* tile) {
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
        uint32_t a[kM][4];
#pragma unroll
        for (int m = 0; m < kM; ++m) a_from_accumulators(a[m], p[m], k);
#pragma unroll
        for (int n = 0; n < HS / 8; n += 2) {
            uint32_t b[4];
            load_b<HS + kPad>(b, tile, k * 16, n * 8);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                mma_bf16(out[m][n], a[m], b[0], b[1]);
                mma_bf16(out[m][n + 1], a[m], b[2], b[3]);
            }
        }
    }
}

// The four threads of a quad (same g) hold one row of an accumulator between them: a row's
// maximum or sum is cuda::warp_max<4> or cuda::warp_sum<4> (common/cuda/reduce.cuh).

// Writes a 16kM x HS accumulator, row group m times scale[m][half], as bf16 to rows row0.. of a
// row-major tensor, skipping rows at or past T.
template <int HS, int kM>
__device__ inline void store_rows(bf16* head, int stride, int row0, int T, const float (&acc)[kM][HS / 8][4],
                                  const float (&scale)[kM][2]) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + 16 * m + lane_row(2 * half);
            if (row >= T) continue;
            bf16* dst = head + size_t(row) * stride;
#pragma unroll
            for (int n = 0; n < HS / 8; ++n)
                *reinterpret_cast<uint32_t*>(dst + lane_col(n, 0)) =
                    pack_bf16(acc[m][n][2 * half] * scale[m][half], acc[m][n][2 * half + 1] * scale[m][half]);
        }
}

// ---- forward ----------------------------------------------------------------------------------------

// The online softmax, one tile of scores at a time. For each of the thread's 2·kM rows: `s` holds
// this tile's scores q·k as they came out of the product (masked ones -inf), `row_max` the largest
// score of the tiles before, `row_sum` this thread's share of sum 2^((score - row_max)·scale_log2)
// over them, `o` the output so far, sum p·v with the same p. scale_log2 = log2(e)/sqrt(HS), so that
// 2^(score·scale_log2) = e^(score/sqrt(HS)). Afterwards the tile is included: s holds its
// probabilities 2^((score - new max)·scale_log2), and row_max, row_sum and o are in terms of the
// new max. docs/03_flash_attention.md, "The online softmax", derives it.
template <int HS, int kM>
__device__ inline void online_softmax_update(float (&s)[kM][kTileCols][4], float (&o)[kM][HS / 8][4],
                                             float (&row_max)[kM][2], float (&row_sum)[kM][2], float scale_log2) {
    // EXERCISE BEGIN stage03.online_softmax TESTS Kernels.AttentionForward|Kernels.AttentionBackward|Kernels.AttentionBackwardRepeats|Kernels.AttentionLongSequences|Kernels.AttentionBenchmarkVariants|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.CachedGenerationMatchesTheFullForward|Model.MasterWeightsStayFp32|Model.GradientAccumulation|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero|Model.PaddingChangesNothing
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // elements 0, 1 are row g; 2, 3 row g + 8
            float tile_max = -INFINITY;
#pragma unroll
            for (int n = 0; n < kTileCols; ++n)
                tile_max = fmaxf(tile_max, fmaxf(s[m][n][2 * half], s[m][n][2 * half + 1]));
            const float new_max = fmaxf(row_max[m][half], cuda::warp_max<4>(tile_max));
            // The maximum in log2 units. A row with nothing unmasked yet keeps max -inf: subtract 0
            // instead, so that no -inf - -inf.
            const float base = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
            const float rescale = exp2f(row_max[m][half] * scale_log2 - base);  // 0 on the first tile
            row_sum[m][half] *= rescale;
#pragma unroll
            for (int n = 0; n < HS / 8; ++n) {
                o[m][n][2 * half] *= rescale;
                o[m][n][2 * half + 1] *= rescale;
            }
#pragma unroll
            for (int n = 0; n < kTileCols; ++n) {
                // One fused multiply-add and one exp2 per score: the scale costs nothing.
                s[m][n][2 * half] = exp2f(fmaf(s[m][n][2 * half], scale_log2, -base));
                s[m][n][2 * half + 1] = exp2f(fmaf(s[m][n][2 * half + 1], scale_log2, -base));
                row_sum[m][half] += s[m][n][2 * half] + s[m][n][2 * half + 1];
            }
            row_max[m][half] = new_max;
        }
    // EXERCISE END
}

// Scores q·kᵀ of the warp's rows (queries row0..) against key tile key0... On a tile that holds
// part of the diagonal (kDiagonal), keys after the query are -inf: the causal mask. It is a
// template parameter so that the tiles before the diagonal, all but one or two of a row's, are
// compiled without it.
template <bool kDiagonal, int HS, int kM>
__device__ inline void scores(float (&s)[kM][kTileCols][4], const uint32_t (&q)[kM][HS / 16][4], const bf16* k_tile,
                              int row0, int key0) {
    mma_rows_by_tile_transposed<HS, kM>(s, q, k_tile);
    if constexpr (kDiagonal) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int n = 0; n < kTileCols; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (key0 + lane_col(n, e) > row0 + 16 * m + lane_row(e)) s[m][n][e] = -INFINITY;
    }
}

// One block: 128 queries of one (batch, head), against the key tiles up to its last query.
// kRowsPerWarp (32 or 16) sets the warps: 4 of 32 rows or 8 of 16. lse[bh·T + t] is the natural
// log of sum_k exp(q·k / sqrt(HS)).
template <int HS, int kRowsPerWarp>
__global__ void __launch_bounds__(kQueryRows / kRowsPerWarp * 32, kRowsPerWarp == 32 ? 2 : 1)
    flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, float scale_log2) {
    constexpr int kM = kRowsPerWarp / 16, kThreads = kQueryRows / kRowsPerWarp * 32, LD = HS + kPad;
    // Two buffers each of k and v, tile b at k_s + b·kTile·LD. v's two hold the 128 queries first,
    // on their way to registers.
    __shared__ __align__(16) bf16 k_s[2 * kTile * LD];
    __shared__ __align__(16) bf16 v_s[2 * kTile * LD];

    // Reversed: within one (batch, head), the lowest blockIdx.x takes the longest row of tiles.
    // Only within one: blockIdx.x (the query block) varies fastest and blockIdx.y is the (batch,
    // head), so the blocks of every query block of head 0 come before those of head 1 (in the
    // order in which GPUs usually start blocks; CUDA promises none).
    const int query0 = (gridDim.x - 1 - blockIdx.x) * kQueryRows;
    const Head<HS> head(qkv, T, NH);
    const int stride = head.stride;
    const int warp_row = threadIdx.x / 32 * kRowsPerWarp, row0 = query0 + warp_row;  // the warp's first query
    const int tiles = (min(query0 + kQueryRows, T) + kTile - 1) / kTile;  // up to the block's last query

    // The queries pass through v's buffers into registers, where they stay, while key tile 0 loads.
    load_rows_async<HS, kQueryRows, kThreads>(v_s, head.q, stride, query0, T);
    load_rows_async<HS, kTile, kThreads>(k_s, head.k, stride, 0, T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q_frag[kM][HS / 16][4];
    load_warp_rows<HS, kM>(q_frag, v_s, warp_row);
    __syncthreads();  // v's buffers are free
    load_rows_async<HS, kTile, kThreads>(v_s, head.v, stride, 0, T);
    cp_async_commit();

    // The pipeline: k and v each have two buffers and their own cp.async groups, committed in the
    // order k0+q, v0, k1, v1, k2, ... so that "all but the newest group" is always the one needed.
    float o[kM][HS / 8][4] = {};
    float row_max[kM][2], row_sum[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m) row_max[m][0] = row_max[m][1] = -INFINITY, row_sum[m][0] = row_sum[m][1] = 0.0f;
    for (int j = 0; j < tiles; ++j) {
        const int key0 = j * kTile;
        bf16 *k_tile = k_s + j % 2 * kTile * LD, *k_next = k_s + (j + 1) % 2 * kTile * LD;
        bf16 *v_tile = v_s + j % 2 * kTile * LD, *v_next = v_s + (j + 1) % 2 * kTile * LD;
        // The warp skips a tile whose keys all come after its last query (or whose queries are all
        // past T); it masks one whose last key comes after its first query.
        const bool needed = row0 < T && key0 < row0 + kRowsPerWarp;
        const bool diagonal = key0 + kTile - 1 > row0;

        cp_async_wait<1>();  // k of tile j is here (v of tile j may not be)
        __syncthreads();     // ... for every thread; and everyone is done with k of tile j - 1
        if (j + 1 < tiles) load_rows_async<HS, kTile, kThreads>(k_next, head.k, stride, key0 + kTile, T);
        cp_async_commit();
        float s[kM][kTileCols][4];
        if (needed) {
            if (diagonal) scores<true, HS, kM>(s, q_frag, k_tile, row0, key0);
            else scores<false, HS, kM>(s, q_frag, k_tile, row0, key0);
            online_softmax_update<HS, kM>(s, o, row_max, row_sum, scale_log2);
        }

        cp_async_wait<1>();  // v of tile j is here (k of tile j + 1 may not be)
        __syncthreads();     // ... for every thread; and everyone is done with v of tile j - 1
        if (j + 1 < tiles) load_rows_async<HS, kTile, kThreads>(v_next, head.v, stride, key0 + kTile, T);
        cp_async_commit();
        if (needed) mma_accumulators_by_tile<HS, kM>(o, s, v_tile);
    }

    float inv_sum[kM][2];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const float sum = cuda::warp_sum<4>(row_sum[m][half]);
            inv_sum[m][half] = 1.0f / sum;
            const int query = row0 + 16 * m + lane_row(2 * half);
            if (threadIdx.x % 4 == 0 && query < T)
                lse[head.stats_offset + query] = (row_max[m][half] * scale_log2 + log2f(sum)) * kLn2;
        }
    store_rows<HS, kM>(out + head.out_offset, head.C, row0, T, o, inv_sum);
}

// ---- backward ---------------------------------------------------------------------------------------
//
// With P = softmax(S), S = q·kᵀ/sqrt(HS) and dP = dout·vᵀ:
//   dv = Pᵀ·dout      dS = P ∘ (dP − D),  D = rowsum(dout ∘ out)      dq = dS·k/sqrt(HS)      dk = dSᵀ·q/sqrt(HS)
// P is recomputed from the saved log-sum-exp: P = 2^(q·k · log2(e)/sqrt(HS) − lse·log2(e)).
//
// dk and dv sum over queries, dq over keys: a block that owns some keys walks down their column
// of tiles for dk and dv, a block that owns some queries walks along their row for dq. Each sum is
// made by one block in one order, so the backward gives the same bits on every run.

// D for every row (b, h, t), laid out like lse; and, where dq_sums is given (only the atomic-dq
// variant has them), that row's HS fp32 sums of dq set to 0. HS/8 threads per row, 16 bytes each.
template <int HS>
__global__ void flash_row_dot_kernel(float* dot, float* dq_sums, const bf16* out, const bf16* dout, int B, int T,
                                     int NH) {
    constexpr int kLanes = HS / 8;
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    const size_t row = i / kLanes, rows = size_t(B) * NH * T;
    float sum = 0.0f;
    if (row < rows) {
        const size_t t = row % T, bh = row / T, h = bh % NH, b = bh / NH;
        const size_t at = (b * T + t) * NH * HS + h * HS + (i % kLanes) * 8;
        const uint4 o4 = *reinterpret_cast<const uint4*>(out + at);
        const uint4 d4 = *reinterpret_cast<const uint4*>(dout + at);
        const bf16* o8 = reinterpret_cast<const bf16*>(&o4);
        const bf16* d8 = reinterpret_cast<const bf16*>(&d4);
        for (int e = 0; e < 8; ++e) sum += to_float(o8[e]) * to_float(d8[e]);
        if (dq_sums) {
            float4* zero = reinterpret_cast<float4*>(dq_sums + row * HS + (i % kLanes) * 8);
            zero[0] = zero[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
    for (int offset = kLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (row < rows && i % kLanes == 0) dot[row] = sum;
}

// The per-row numbers of a query tile: lse in log2 units and D, one row per thread of the first 64.
// Rows past T get lse = +inf, so that their probabilities are 0. Read from global memory into
// registers first and written to shared memory later, so that the read's latency passes under the
// products of the tile before.
struct RowStats {
    float lse, dot;
};
__device__ inline RowStats read_row_stats(const float* lse, const float* dot, int query0, int T) {
    const int query = query0 + threadIdx.x;
    if (threadIdx.x >= kTile || query >= T) return {INFINITY, 0.0f};
    return {lse[query] * kLog2e, dot[query]};
}
__device__ inline void write_row_stats(float* lse_s, float* dot_s, RowStats stats) {
    if (threadIdx.x < kTile) lse_s[threadIdx.x] = stats.lse, dot_s[threadIdx.x] = stats.dot;
}

// Pᵀ for the warp's 16 keys (rows, from key0) against a tile of 64 queries (columns, from query0),
// recomputed from the queries' log-sum-exp. On a tile that holds part of the diagonal a key after
// the query gets 0.
template <bool kDiagonal, int HS>
__device__ inline void probabilities_transposed(float (&p)[1][kTileCols][4], const uint32_t (&k)[1][HS / 16][4],
                                                const bf16* q_tile, const float* lse_s, float scale_log2, int warp_key0,
                                                int query0) {
    mma_rows_by_tile_transposed<HS, 1>(p, k, q_tile);
#pragma unroll
    for (int n = 0; n < kTileCols; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int query = lane_col(n, e);
            const float s = kDiagonal && warp_key0 + lane_row(e) > query0 + query ? -INFINITY : p[0][n][e];
            p[0][n][e] = exp2f(fmaf(s, scale_log2, -lse_s[query]));
        }
}

// FlashAttention-2's dq, which the benchmark times beside the stage's (the atomic-dq variant):
// dq of one tile of 64 queries += dS · k, inside the dk/dv kernel, with dS (64 queries x 64 keys)
// in shared memory as dSᵀ (ds_s[key][query], rows kTile + kPad long) and the block's keys in k_s.
// Warp w takes queries 16w..16w+15 and adds its 16 x HS products into dq's fp32 sums (rows HS
// apart) with atomic additions: every key block adds into the same rows, in whatever order the
// blocks run.
template <int HS>
__device__ inline void add_dq_atomically(float* dq_sums, const bf16* ds_s, const bf16* k_s, int query0, int T) {
    const int row0 = 16 * (threadIdx.x / 32);
    float dq[HS / 8][4] = {};
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
        uint32_t a[4];
        load_a_transposed<kTile + kPad>(a, ds_s, row0, k * 16);  // dS, rows row0.., keys 16k..
#pragma unroll
        for (int n = 0; n < HS / 8; n += 2) {
            uint32_t b[4];
            load_b<HS + kPad>(b, k_s, k * 16, n * 8);
            mma_bf16(dq[n], a, b[0], b[1]);
            mma_bf16(dq[n + 1], a, b[2], b[3]);
        }
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int query = query0 + row0 + lane_row(e);
        if (query >= T) continue;
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) atomicAdd(dq_sums + size_t(query) * HS + lane_col(n, e), dq[n][e]);
    }
}

// Shared memory of flash_backward_dkdv_kernel, in bytes: with kAtomicDq first k (which
// add_dq_atomically reads) and dSᵀ (rows kTile + kPad long); then two buffers each of q and dout,
// two of the per-row numbers. 37,888 bytes at HS = 64; 56,320 with kAtomicDq, past the 48 KB a
// block gets without asking: FlashAttention::backward asks.
template <int HS, bool kAtomicDq>
constexpr int dkdv_shared_bytes() {
    constexpr int LD = HS + kPad, kDsLD = kTile + kPad;
    return ((kAtomicDq ? kTile * LD + kTile * kDsLD : 0) + 4 * kTile * LD) * int(sizeof(bf16)) +
           4 * kTile * int(sizeof(float));
}

// dk and dv. One block: kKeys keys of one (batch, head) (64 or 128: 4 or 8 warps of 16 keys), against
// the query tiles of 64 from the one of its first key to the last. Each warp owns 16 keys and
// computes the transposed products (keys as rows), so dk and dv stay in its registers until the
// end: 4 products per pair of tiles. kAtomicDq (blocks of 64 keys only) adds a fifth, dq's share
// of the tile, added with atomics (add_dq_atomically): the benchmark's FlashAttention-2 variant.
template <int HS, int kKeys, bool kAtomicDq>
__global__ void __launch_bounds__(kKeys * 2, kKeys == kTile ? 2 : 1)
    flash_backward_dkdv_kernel(bf16* dqkv, float* dq_sums, const bf16* qkv, const bf16* dout, const float* lse,
                               const float* dot, int T, int NH, float scale_log2, float scale) {
    static_assert(!kAtomicDq || kKeys == kTile, "add_dq_atomically gives each of 4 warps 16 of a tile's 64 queries");
    static_assert(kKeys <= 2 * kTile, "k and v pass through the two buffers of q and dout");
    constexpr int kThreads = kKeys * 2, LD = HS + kPad, kDsLD = kTile + kPad;
    static_assert(kThreads >= kTile, "the per-row numbers are read one row per thread");
    extern __shared__ uint4 shared[];  // uint4: 16-byte aligned, as ldmatrix and cp.async need
    bf16* k_kept = reinterpret_cast<bf16*>(shared);  // kAtomicDq only
    bf16* ds_s = k_kept + kTile * LD;                 // kAtomicDq only: dSᵀ
    bf16* q_s = k_kept + (kAtomicDq ? kTile * LD + kTile * kDsLD : 0);  // two buffers of kTile * LD: the one
    bf16* do_s = q_s + 2 * kTile * LD;  // of the i-th query tile walked at q_s + i % 2 * kTile * LD; dout's likewise
    float* lse_s = reinterpret_cast<float*>(do_s + 2 * kTile * LD);  // two buffers of kTile
    float* dot_s = lse_s + 2 * kTile;

    const int key0 = blockIdx.x * kKeys, warp_key0 = key0 + 16 * (threadIdx.x / 32);
    const int first_q_tile = key0 / kTile, q_tiles = (T + kTile - 1) / kTile;
    const Head<HS> head(qkv, T, NH);
    const int C = head.C, stride = head.stride;
    const bf16* dO = dout + head.out_offset;
    lse += head.stats_offset;
    dot += head.stats_offset;
    if constexpr (kAtomicDq) dq_sums += head.stats_offset * HS;  // else there are none (nullptr)

    // k and v of the block's keys pass through shared memory into registers: through the end of q's
    // and dout's buffers (with 64 keys the second buffers, and the first query tile loads into the
    // first beside them; with 128 keys all of both), or with kAtomicDq through k's own buffer and
    // dSᵀ's. The first query tile is the one of the block's first key (no earlier query sees them).
    constexpr int kStaging = (2 * kTile - kKeys) * LD;
    bf16* k_staging = kAtomicDq ? k_kept : q_s + kStaging;
    bf16* v_staging = kAtomicDq ? ds_s : do_s + kStaging;
    const int query0_first = first_q_tile * kTile;
    load_rows_async<HS, kKeys, kThreads>(k_staging, head.k, stride, key0, T);
    load_rows_async<HS, kKeys, kThreads>(v_staging, head.v, stride, key0, T);
    if constexpr (kKeys <= kTile) {
        load_rows_async<HS, kTile, kThreads>(q_s, head.q, stride, query0_first, T);
        load_rows_async<HS, kTile, kThreads>(do_s, dO, C, query0_first, T);
    }
    cp_async_commit();
    write_row_stats(lse_s, dot_s, read_row_stats(lse, dot, query0_first, T));
    cp_async_wait<0>();
    __syncthreads();
    uint32_t k_frag[1][HS / 16][4], v_frag[1][HS / 16][4];
    load_warp_rows<HS, 1>(k_frag, k_staging, warp_key0 - key0);
    load_warp_rows<HS, 1>(v_frag, v_staging, warp_key0 - key0);
    __syncthreads();  // the staging rows are free (kAtomicDq: dSᵀ's buffer is)
    if constexpr (kKeys > kTile) {
        load_rows_async<HS, kTile, kThreads>(q_s, head.q, stride, query0_first, T);
        load_rows_async<HS, kTile, kThreads>(do_s, dO, C, query0_first, T);
        cp_async_commit();
    }

    float dk[1][HS / 8][4] = {}, dv[1][HS / 8][4] = {};
    for (int q_tile = first_q_tile; q_tile < q_tiles; ++q_tile) {
        const int buf = (q_tile - first_q_tile) % 2, next = 1 - buf, query0 = q_tile * kTile;
        const bf16 *q_tile_s = q_s + buf * kTile * LD, *do_tile_s = do_s + buf * kTile * LD;
        const float *lse_tile_s = lse_s + buf * kTile, *dot_tile_s = dot_s + buf * kTile;
        const bool last = q_tile + 1 == q_tiles;
        RowStats next_stats{};
        if (!last) {  // the next tile loads while this one is computed on
            load_rows_async<HS, kTile, kThreads>(q_s + next * kTile * LD, head.q, stride, query0 + kTile, T);
            load_rows_async<HS, kTile, kThreads>(do_s + next * kTile * LD, dO, C, query0 + kTile, T);
            next_stats = read_row_stats(lse, dot, query0 + kTile, T);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the tile just asked for
        __syncthreads();

        // With 128 keys a block starts on a tile that its second half of keys follows entirely: those
        // warps skip it (every P there is 0). A warp masks a tile in which one of its keys comes after
        // one of the queries. With 64 keys every warp has work in every tile, and only the first is
        // masked.
        const bool needed = kKeys == kTile || warp_key0 < query0 + kTile;
        const bool diagonal = warp_key0 + 15 > query0;
        float p[1][kTileCols][4];  // Pᵀ, 16 keys x 64 queries
        if (needed) {
            if (diagonal)
                probabilities_transposed<true, HS>(p, k_frag, q_tile_s, lse_tile_s, scale_log2, warp_key0, query0);
            else
                probabilities_transposed<false, HS>(p, k_frag, q_tile_s, lse_tile_s, scale_log2, warp_key0, query0);
            mma_accumulators_by_tile<HS, 1>(dv, p, do_tile_s);  // dv += Pᵀ·dout
            float dp[1][kTileCols][4];
            mma_rows_by_tile_transposed<HS, 1>(dp, v_frag, do_tile_s);  // dPᵀ = v·doutᵀ
#pragma unroll
            for (int n = 0; n < kTileCols; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) p[0][n][e] *= dp[0][n][e] - dot_tile_s[lane_col(n, e)];  // dSᵀ
            mma_accumulators_by_tile<HS, 1>(dk, p, q_tile_s);  // dk += dSᵀ·q
        }
        if constexpr (kAtomicDq) {
            // dSᵀ into shared memory, rounded as the dk product rounded it, for the whole block's dq.
            // (With 64 keys `needed` is always true: p holds dSᵀ.)
#pragma unroll
            for (int n = 0; n < kTileCols; ++n)
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    *reinterpret_cast<uint32_t*>(ds_s + (warp_key0 - key0 + lane_row(2 * half)) * kDsLD +
                                                 lane_col(n, 0)) =
                        pack_bf16(p[0][n][2 * half], p[0][n][2 * half + 1]);
            __syncthreads();
            add_dq_atomically<HS>(dq_sums, ds_s, k_kept, query0, T);
        }
        if (!last) write_row_stats(lse_s + next * kTile, dot_s + next * kTile, next_stats);
        __syncthreads();  // everyone is done with this tile's buffers (and dSᵀ) before they are loaded again
    }

    const float dk_scale[1][2] = {{scale, scale}}, one[1][2] = {{1.0f, 1.0f}};
    bf16* dq_head = dqkv + head.qkv_offset;
    store_rows<HS, 1>(dq_head + C, stride, warp_key0, T, dk, dk_scale);
    store_rows<HS, 1>(dq_head + 2 * C, stride, warp_key0, T, dv, one);
}

// One key tile's share of dq for the warp's 16 queries (rows from row0) against keys key0..key0 + 63:
// P recomputed from the rows' log-sum-exp (row_lse, in log2 units, +inf past T), dP = dout·vᵀ,
// dS = P ∘ (dP − D) (row_dot: D), dq += dS·k. q and dout are the warp's rows as A operands; on a
// tile that holds part of the diagonal (kDiagonal) a key after the query gets P = 0.
template <bool kDiagonal, int HS>
__device__ inline void add_dq_of_tile(float (&dq)[1][HS / 8][4], const uint32_t (&q)[1][HS / 16][4],
                                      const uint32_t (&dout)[1][HS / 16][4], const bf16* k_tile, const bf16* v_tile,
                                      const float (&row_lse)[2], const float (&row_dot)[2], float scale_log2, int row0,
                                      int key0) {
    // EXERCISE BEGIN stage03.flash_backward_dq TESTS Kernels.AttentionBackward|Kernels.AttentionBackwardRepeats|Kernels.AttentionLongSequences|Kernels.AttentionBenchmarkVariants|Model.Step0LossAndGradients|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu
    float p[1][kTileCols][4];
    scores<kDiagonal, HS, 1>(p, q, k_tile, row0, key0);  // q·kᵀ; keys after the query -inf
    float dp[1][kTileCols][4];
    mma_rows_by_tile_transposed<HS, 1>(dp, dout, v_tile);  // dP = dout·vᵀ
#pragma unroll
    for (int n = 0; n < kTileCols; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // elements 0, 1 are row g; 2, 3 row g + 8
            const float prob = exp2f(fmaf(p[0][n][e], scale_log2, -row_lse[e / 2]));  // 2^-inf = 0
            p[0][n][e] = prob * (dp[0][n][e] - row_dot[e / 2]);                         // dS
        }
    mma_accumulators_by_tile<HS, 1>(dq, p, k_tile);  // dq += dS·k
    // EXERCISE END
}

// dq. One block: kQueries queries of one (batch, head) (64 or 128: 4 or 8 warps of 16), against the
// key tiles up to its last query, in the forward's order. Each warp keeps its queries' q and dout
// as A operands and their lse and D in registers, and recomputes P and dP for each key tile: 3
// products per pair of tiles. Only this block writes these rows of dq: no atomics.
template <int HS, int kQueries>
__global__ void __launch_bounds__(kQueries * 2, kQueries == kTile ? 2 : 1)
    flash_backward_dq_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* dot, int T,
                             int NH, float scale_log2, float scale) {
    static_assert(kQueries <= 2 * kTile, "the queries pass through the two buffers of k and v");
    constexpr int kThreads = kQueries * 2, LD = HS + kPad;
    __shared__ __align__(16) bf16 k_s[2 * kTile * LD];  // two buffers each, tile j at k_s + j % 2 · kTile·LD
    __shared__ __align__(16) bf16 v_s[2 * kTile * LD];

    const int query0 = (gridDim.x - 1 - blockIdx.x) * kQueries;  // reversed, as in the forward
    const Head<HS> head(qkv, T, NH);
    const int stride = head.stride;
    const int row0 = query0 + 16 * (threadIdx.x / 32);  // the warp's first query
    const int tiles = (min(query0 + kQueries, T) + kTile - 1) / kTile;  // up to the block's last query

    // q and dout pass through the end of k's and v's buffers into registers. With 64 queries that
    // is the second buffer, and key tile 0 loads into the first beside them.
    constexpr int kStaging = (2 * kTile - kQueries) * LD;
    load_rows_async<HS, kQueries, kThreads>(k_s + kStaging, head.q, stride, query0, T);
    load_rows_async<HS, kQueries, kThreads>(v_s + kStaging, dout + head.out_offset, head.C, query0, T);
    if constexpr (kQueries <= kTile) {
        load_rows_async<HS, kTile, kThreads>(k_s, head.k, stride, 0, T);
        load_rows_async<HS, kTile, kThreads>(v_s, head.v, stride, 0, T);
    }
    cp_async_commit();
    float row_lse[2], row_dot[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int query = row0 + lane_row(2 * half);
        row_lse[half] = query < T ? lse[head.stats_offset + query] * kLog2e : INFINITY;
        row_dot[half] = query < T ? dot[head.stats_offset + query] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q_frag[1][HS / 16][4], do_frag[1][HS / 16][4];
    load_warp_rows<HS, 1>(q_frag, k_s + kStaging, row0 - query0);
    load_warp_rows<HS, 1>(do_frag, v_s + kStaging, row0 - query0);
    __syncthreads();  // the staging rows are free
    if constexpr (kQueries > kTile) {
        load_rows_async<HS, kTile, kThreads>(k_s, head.k, stride, 0, T);
        load_rows_async<HS, kTile, kThreads>(v_s, head.v, stride, 0, T);
        cp_async_commit();
    }

    float dq[1][HS / 8][4] = {};
    for (int j = 0; j < tiles; ++j) {
        const int key0 = j * kTile, buf = j % 2;
        if (j + 1 < tiles) {  // the next tile loads while this one is computed on
            load_rows_async<HS, kTile, kThreads>(k_s + (1 - buf) * kTile * LD, head.k, stride, key0 + kTile, T);
            load_rows_async<HS, kTile, kThreads>(v_s + (1 - buf) * kTile * LD, head.v, stride, key0 + kTile, T);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the tile just asked for
        __syncthreads();
        // As in the forward: a warp skips a tile whose keys all come after its last query (or whose
        // queries are all past T) and masks one whose last key comes after its first query.
        const bool needed = row0 < T && key0 < row0 + 16;
        const bool diagonal = key0 + kTile - 1 > row0;
        const bf16 *k_tile = k_s + buf * kTile * LD, *v_tile = v_s + buf * kTile * LD;
        if (needed && diagonal)
            add_dq_of_tile<true, HS>(dq, q_frag, do_frag, k_tile, v_tile, row_lse, row_dot, scale_log2, row0, key0);
        else if (needed)
            add_dq_of_tile<false, HS>(dq, q_frag, do_frag, k_tile, v_tile, row_lse, row_dot, scale_log2, row0, key0);
        __syncthreads();  // everyone is done with this buffer before it is loaded again
    }

    const float dq_scale[1][2] = {{scale, scale}};
    store_rows<HS, 1>(dqkv + head.qkv_offset, stride, row0, T, dq, dq_scale);
}

// FlashAttention-2's last step, for the atomic-dq variant: dq = its fp32 sums / sqrt(HS), rounded
// to bf16 into dqkv's q columns. 8 values per thread.
template <int HS>
__global__ void flash_dq_from_sums_kernel(bf16* dqkv, const float* dq_sums, int B, int T, int NH, float scale) {
    constexpr int kLanes = HS / 8;
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    const size_t row = i / kLanes;
    if (row >= size_t(B) * NH * T) return;
    const size_t t = row % T, bh = row / T, h = bh % NH, b = bh / NH, col = (i % kLanes) * 8;
    const float4* src = reinterpret_cast<const float4*>(dq_sums + row * HS + col);
    const float4 lo = src[0], hi = src[1];
    const uint4 packed = {pack_bf16(lo.x * scale, lo.y * scale), pack_bf16(lo.z * scale, lo.w * scale),
                          pack_bf16(hi.x * scale, hi.y * scale), pack_bf16(hi.z * scale, hi.w * scale)};
    *reinterpret_cast<uint4*>(dqkv + (b * T + t) * 3 * NH * HS + h * HS + col) = packed;
}

// ---- the op -----------------------------------------------------------------------------------------

// The trainer uses FlashAttention = FlashAttentionWith<32>: the first of each choice below, and no
// atomic dq. The benchmark times the others (tests/bench/attention_variants.cuh):
// - kRowsPerWarp: queries per warp in the forward, 32 (4 warps a block, FlashAttention-2's
//   choice) or 16 (8 warps);
// - kBackwardKeys: keys per block of the dk/dv kernel, 64 or 128 (4 or 8 warps of 16 keys);
// - kDqQueries: queries per block of the dq kernel, 64 or 128 (4 or 8 warps of 16 queries);
// - kAtomicDq: dq made in the dk/dv kernel and added into fp32 sums with atomics, FlashAttention-2's
//   way (one pass, 5 products per pair of tiles instead of 7; the bits then vary from run to run).
template <int kRowsPerWarp, int kBackwardKeys = kTile, int kDqQueries = kTile, bool kAtomicDq = false>
struct FlashAttentionWith {
    static_assert(kRowsPerWarp == 16 || kRowsPerWarp == 32, "a warp's rows are one or two mma tiles of 16");
    static_assert(kBackwardKeys == kTile || kBackwardKeys == 2 * kTile, "dk/dv blocks of 64 or 128 keys");
    static_assert(kDqQueries == kTile || kDqQueries == 2 * kTile, "dq blocks of 64 or 128 queries");
    static_assert(!kAtomicDq || (kBackwardKeys == kTile && kDqQueries == kTile),
                  "the atomic dq is made in the dk/dv kernel's blocks of 64 keys; there is no dq kernel");
    static constexpr const char* source = __FILE__;
    // A head is a multiple of the mma's k = 16; beyond 64 the backward's accumulators no longer
    // fit in registers. GPT-2 uses 64 at every size; the micro and tiny test models 16 and 32.
    static constexpr int kHeadSizes[3] = {16, 32, 64};
    static constexpr bool kSavesLogSumExp = true;  // all it saves; no T x T buffer, memory grows with T
    // Every sum of the backward made by one block in one order: the same bits on every run
    // (Kernels.AttentionBackwardRepeats checks it).
    static constexpr bool kBitwiseRepeatable = !kAtomicDq;

    // Saved for backward: the log-sum-exp of every row, fp32, B x NH x T.
    static size_t saved_bytes(size_t B, size_t T, size_t, size_t NH, size_t) { return B * NH * T * sizeof(float); }
    // Scratch (backward only): D = rowsum(dout ∘ out), fp32, B x NH x T; with kAtomicDq dq's fp32
    // sums first, B x NH x T x HS.
    static size_t scratch_bytes(size_t B, size_t T, size_t C, size_t NH, size_t) {
        return (kAtomicDq ? B * T * C * sizeof(float) : 0) + B * NH * T * sizeof(float);
    }

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, void* saved, const Act* qkv, int B, int T, int C, int NH,
                        void* /*scratch*/) {
        static_assert(std::is_same_v<Act, bf16>, "flash attention runs on bf16 tensor cores (stages 02 and later)");
        check_grid(B, NH);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            const dim3 grid(cuda::ceil_div(T, kQueryRows), B * NH);
            flash_forward_kernel<HS, kRowsPerWarp><<<grid, kQueryRows / kRowsPerWarp * 32, 0, ctx.stream>>>(
                out, static_cast<float*>(saved), qkv, T, NH, scale_log2(HS));
            LAUNCH_CHECK();
        });
    }

    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                         const void* saved, int B, int T, int C, int NH, void* scratch) {
        static_assert(std::is_same_v<Act, bf16>, "flash attention runs on bf16 tensor cores (stages 02 and later)");
        check_grid(B, NH);
        const float* lse = static_cast<const float*>(saved);
        float* dq_sums = kAtomicDq ? static_cast<float*>(scratch) : nullptr;  // first: float4 stores need 16 bytes
        float* dot = static_cast<float*>(scratch) + (kAtomicDq ? size_t(B) * T * C : 0);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            const float scale = 1.0f / std::sqrt(float(HS));
            row_dot<HS>(ctx, dot, dq_sums, out, dout, B, T, NH);
            constexpr int bytes = dkdv_shared_bytes<HS, kAtomicDq>();
            auto dkdv = flash_backward_dkdv_kernel<HS, kBackwardKeys, kAtomicDq>;
            // Past 48 KB a kernel must ask for its shared memory (allowed while a CUDA Graph is captured).
            if (bytes > 48 * 1024)
                CUDA_CHECK(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            dkdv<<<dim3(cuda::ceil_div(T, kBackwardKeys), B * NH), kBackwardKeys * 2, bytes, ctx.stream>>>(
                dqkv, dq_sums, qkv, dout, lse, dot, T, NH, scale_log2(HS), scale);
            LAUNCH_CHECK();
            if constexpr (kAtomicDq) {
                const size_t threads = size_t(B) * NH * T * (HS / 8);
                flash_dq_from_sums_kernel<HS>
                    <<<cuda::ceil_div(threads, 256), 256, 0, ctx.stream>>>(dqkv, dq_sums, B, T, NH, scale);
            } else {
                flash_backward_dq_kernel<HS, kDqQueries>
                    <<<dim3(cuda::ceil_div(T, kDqQueries), B * NH), kDqQueries * 2, 0, ctx.stream>>>(
                        dqkv, qkv, dout, lse, dot, T, NH, scale_log2(HS), scale);
            }
            LAUNCH_CHECK();
        });
    }

    // D for every row (and, given dq_sums, their zeroing); the benchmark's "before" variant reuses it.
    template <int HS>
    static void row_dot(CudaBackend::Context& ctx, float* dot, float* dq_sums, const bf16* out, const bf16* dout, int B,
                        int T, int NH) {
        const size_t threads = size_t(B) * NH * T * (HS / 8);
        flash_row_dot_kernel<HS><<<cuda::ceil_div(threads, 256), 256, 0, ctx.stream>>>(dot, dq_sums, out, dout, B, T,
                                                                                      NH);
        LAUNCH_CHECK();
    }

    static float scale_log2(int HS) { return kLog2e / std::sqrt(float(HS)); }

    // Blocks of rows go in the grid's x, (batch, head) in its y.
    static void check_grid(int B, int NH) {
        if (size_t(B) * NH > 65535)
            throw Error("flash attention: batch x heads = " + std::to_string(size_t(B) * NH) +
                        " is more than the 65535 blocks a grid's y dimension holds");
    }

    template <class F>
    static void with_head_size(int C, int NH, F&& f) {
        switch (C / NH) {
            case 16: f(std::integral_constant<int, 16>{}); break;
            case 32: f(std::integral_constant<int, 32>{}); break;
            case 64: f(std::integral_constant<int, 64>{}); break;
            default:
                throw Error("flash attention handles head sizes 16, 32 and 64; this model's is C/H = " +
                            std::to_string(C) + "/" + std::to_string(NH) + " = " + std::to_string(C / NH));
        }
    }
};

using FlashAttention = FlashAttentionWith<32>;

}  // namespace gpt::stage03
