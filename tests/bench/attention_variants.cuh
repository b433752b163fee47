// The benchmark's variants of stage 03's attention (tests/bench/attention.py, bench_stageNN
// --attention-variants yes): ops the trainer never uses, timed beside the stage's own so that
// docs/03b_flash_attention_tensor_cores.md can say what each design choice is worth.
//
//   before: 64 x 64 tiles, a dq kernel   stage 03's kernels before they took FlashAttention-2's design
//                                        (namespace before, below, as they were, only their building
//                                        blocks now shared with stages/03_flash_attention/)
//   16 rows per warp                     the stage's kernels with 8 warps of 16 queries per block
//   atomic dq                            FlashAttention-2's backward: dq made inside the dk/dv kernel
//                                        and added with atomics into fp32 sums (5 products per pair of
//                                        tiles instead of 7; the bits vary from run to run)
//   128 keys per dk/dv block,            the stage's kernels with 8 warps per backward block instead of
//   128 queries per dq block, both       4: each q, dout, k and v tile read into shared memory feeds
//                                        twice as many warps
//   no tensor cores (forward)            the stage's algorithm alone in fp32 arithmetic, one query
//                                        row per thread (stages/03_flash_attention/basic_flash_forward.cuh,
//                                        the stage's first exercise); the stage's backward
//
// Included after the header of a stage from 03 on (bench_stage.cu.in, test_stage.cu.in), which
// brings stage 03's flash_attention.cuh: from the stage's own tree, which in a workshop build is
// the copy with the exercises stubbed (including the file here by its path in stages/ would bring
// a second definition of every kernel).
#pragma once
#include <cmath>
#include <tuple>

#include "attention_variants.h"

namespace gpt::stage03::before {

constexpr int kWarps = 4;  // each warp owns 16 of the block's 64 rows
constexpr int kThreads = 32 * kWarps;

// The warp's own 16 rows of a tile as HS/16 A operands, to be kept in registers (the
// queries in the forward and dq kernels, the keys and values in the dk/dv kernel).
template <int HS>
__device__ inline void load_warp_rows(uint32_t (&a)[HS / 16][4], const bf16* tile) {
    for (int d = 0; d < HS / 16; ++d) load_a<HS + kPad>(a[d], tile, (threadIdx.x / 32) * 16, d * 16);
}

// acc[16 x 64] = A[16 x HS] · tileᵀ, tile[64][HS]: scores q·kᵀ (and, in the backward, kᵀ·q, dout·vᵀ,
// v·doutᵀ). `a` holds the warp's 16 rows as HS/16 A operands.
template <int HS>
__device__ inline void mma_rows_by_tile_transposed(float (&acc)[kTileCols][4], const uint32_t (&a)[HS / 16][4],
                                                   const bf16* tile) {
    for (int n = 0; n < kTileCols; ++n)
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < HS / 16; ++k)
#pragma unroll
        for (int n = 0; n < kTileCols; n += 2) {
            uint32_t b[4];
            load_b_transposed<HS + kPad>(b, tile, n * 8, k * 16);
            mma_bf16(acc[n], a[k], b[0], b[1]);
            mma_bf16(acc[n + 1], a[k], b[2], b[3]);
        }
}


// out[16 x HS] += P[16 x 64] · tile, tile[64][HS]: p·v (and dsᵀ·q, pᵀ·dout, ds·k).
template <int HS>
__device__ inline void mma_accumulators_by_tile(float (&out)[HS / 8][4], const float (&p)[kTileCols][4],
                                                const bf16* tile) {
#pragma unroll
    for (int k = 0; k < kTile / 16; ++k) {
        uint32_t a[4];
        a_from_accumulators(a, p, k);
#pragma unroll
        for (int n = 0; n < HS / 8; n += 2) {
            uint32_t b[4];
            load_b<HS + kPad>(b, tile, k * 16, n * 8);
            mma_bf16(out[n], a, b[0], b[1]);
            mma_bf16(out[n + 1], a, b[2], b[3]);
        }
    }
}

// Rows row0..row0+63 of one head (HS elements at `head`, rows `stride` elements apart) into a
// shared tile; rows at or past T become zeros (they are masked, but 0 · garbage could be NaN).
template <int HS>
__device__ inline void load_tile_async(bf16* tile, const bf16* head, int stride, int row0, int T) {
    constexpr int kChunks = HS / 8;  // 16-byte pieces per row
    for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
        const int r = i / kChunks, col = (i % kChunks) * 8, row = row0 + r;
        const bool valid = row < T;
        cp_async_16(tile + r * (HS + kPad) + col, head + size_t(valid ? row : 0) * stride + col, valid);
    }
}

// Rows of the warp's accumulator that belong to this thread: 16·warp + g and 16·warp + g + 8.
__device__ inline int my_row(int half) { return (threadIdx.x / 32) * 16 + (threadIdx.x % 32) / 4 + 8 * half; }
// Column of element e (0..3) of 8-column tile n that this thread holds.
__device__ inline int my_col(int n, int e) { return n * 8 + (threadIdx.x % 4) * 2 + (e & 1); }

// Writes a 16 x HS accumulator (times `scale`) as bf16 to rows row0 + my_row of a row-major
// tensor, skipping rows at or past T.
template <int HS>
__device__ inline void store_rows(bf16* head, int stride, int row0, int T, const float (&acc)[HS / 8][4],
                                  const float (&scale)[2]) {
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + my_row(half);
        if (row >= T) continue;
        bf16* dst = head + size_t(row) * stride;
        for (int n = 0; n < HS / 8; ++n)
            *reinterpret_cast<uint32_t*>(dst + my_col(n, 0)) =
                pack_bf16(acc[n][2 * half] * scale[half], acc[n][2 * half + 1] * scale[half]);
    }
}

// ---- forward ----------------------------------------------------------------------------------------

// The online softmax, one tile of scores at a time. For each of the thread's two rows: `s` holds
// this tile's scores in log2 units (q·k · log2(e)/sqrt(HS); masked ones are -inf), `row_max` the
// largest score of the tiles before, `row_sum` this thread's share of sum 2^(score - row_max) over
// them, `o` the output so far, sum p·v with the same p. Afterwards the tile is included: s holds
// its probabilities 2^(score - new max), and row_max, row_sum and o are in terms of the new max.
// docs/03_flash_attention.md, "The online softmax", derives it.
template <int HS>
__device__ inline void online_softmax_update(float (&s)[kTileCols][4], float (&o)[HS / 8][4], float (&row_max)[2],
                                             float (&row_sum)[2]) {
    for (int half = 0; half < 2; ++half) {  // elements 0, 1 are row g; 2, 3 row g + 8
        float tile_max = -INFINITY;
        for (int n = 0; n < kTileCols; ++n) tile_max = fmaxf(tile_max, fmaxf(s[n][2 * half], s[n][2 * half + 1]));
        const float new_max = fmaxf(row_max[half], cuda::warp_max<4>(tile_max));
        // A row with nothing unmasked yet keeps max -inf: subtract 0 instead, so that no -inf - -inf.
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        const float rescale = exp2f(row_max[half] - base);  // 0 on the first tile
        row_sum[half] *= rescale;
        for (int n = 0; n < HS / 8; ++n) {
            o[n][2 * half] *= rescale;
            o[n][2 * half + 1] *= rescale;
        }
        for (int n = 0; n < kTileCols; ++n) {
            s[n][2 * half] = exp2f(s[n][2 * half] - base);
            s[n][2 * half + 1] = exp2f(s[n][2 * half + 1] - base);
            row_sum[half] += s[n][2 * half] + s[n][2 * half + 1];
        }
        row_max[half] = new_max;
    }
}

// Scores of key tile `key0` for the warp's rows, scaled to log2 units; on the diagonal tile,
// keys after the query are -inf (the causal mask). Tiles before the diagonal need no mask, and
// keys past T only occur on the diagonal, after every real query.
__device__ inline void scale_and_mask(float (&s)[kTileCols][4], float scale_log2, int query0, int key0,
                                      bool diagonal) {
    for (int n = 0; n < kTileCols; ++n)
        for (int e = 0; e < 4; ++e) {
            float x = s[n][e] * scale_log2;
            if (diagonal && key0 + my_col(n, e) > query0 + my_row(e / 2)) x = -INFINITY;
            s[n][e] = x;
        }
}

// One block: 64 queries of one (batch, head), against key tiles 0..its own. lse[bh·T + t] is the
// natural log of sum_k exp(q·k / sqrt(HS)).
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, float scale_log2) {
    constexpr int LD = HS + kPad;
    __shared__ __align__(16) bf16 k_s[2][kTile * LD];
    __shared__ __align__(16) bf16 v_s[2][kTile * LD];

    // Reversed: within one (batch, head), the lowest blockIdx.x takes the longest row of tiles.
    // Only within one: blockIdx.x (the query tile) varies fastest and blockIdx.y is the (batch,
    // head), so the blocks of every query tile of head 0 come before those of head 1 (in the
    // order in which GPUs usually start blocks; CUDA promises none).
    const int q_tile = gridDim.x - 1 - blockIdx.x;
    const Head<HS> head(qkv, T, NH);
    const int C = head.C, stride = head.stride;
    const bf16 *q = head.q, *k = head.k, *v = head.v;
    const int query0 = q_tile * kTile;

    // The queries pass through the second buffer into registers, where they stay.
    load_tile_async<HS>(k_s[1], q, stride, query0, T);
    load_tile_async<HS>(k_s[0], k, stride, 0, T);
    load_tile_async<HS>(v_s[0], v, stride, 0, T);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q_frag[HS / 16][4];
    load_warp_rows<HS>(q_frag, k_s[1]);
    __syncthreads();  // the second buffer is free for key tile 1

    float o[HS / 8][4] = {};
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    for (int j = 0; j <= q_tile; ++j) {
        const int buf = j % 2;
        if (j < q_tile) {  // the next tile loads while this one is computed on
            load_tile_async<HS>(k_s[1 - buf], k, stride, (j + 1) * kTile, T);
            load_tile_async<HS>(v_s[1 - buf], v, stride, (j + 1) * kTile, T);
        }
        cp_async_commit();
        cp_async_wait<1>();  // everything but the tile just asked for
        __syncthreads();

        float s[kTileCols][4];
        mma_rows_by_tile_transposed<HS>(s, q_frag, k_s[buf]);
        scale_and_mask(s, scale_log2, query0, j * kTile, j == q_tile);
        online_softmax_update<HS>(s, o, row_max, row_sum);
        mma_accumulators_by_tile<HS>(o, s, v_s[buf]);
        __syncthreads();  // everyone is done with this buffer before it is loaded again
    }

    float inv_sum[2];
    for (int half = 0; half < 2; ++half) {
        const float sum = cuda::warp_sum<4>(row_sum[half]);
        inv_sum[half] = 1.0f / sum;
        const int query = query0 + my_row(half);
        if (threadIdx.x % 4 == 0 && query < T) lse[head.stats_offset + query] = (row_max[half] + log2f(sum)) * kLn2;
    }
    store_rows<HS>(out + head.out_offset, C, query0, T, o, inv_sum);
}


// The per-row numbers of a query tile: lse in log2 units and D. Rows past T get lse = +inf, so
// that their probabilities are 0.
__device__ inline void load_row_stats(float* lse_s, float* dot_s, const float* lse, const float* dot, int query0,
                                      int T) {
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int query = query0 + r;
        lse_s[r] = query < T ? lse[query] * kLog2e : INFINITY;
        dot_s[r] = query < T ? dot[query] : 0.0f;
    }
}

// One block: 64 keys of one (batch, head), against query tiles from its own to the last. Each warp
// owns 16 keys and computes the transposed products (keys as rows), so dk and dv stay in its
// registers until the end.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* dot,
                               int T, int NH, float scale_log2, float scale) {
    constexpr int LD = HS + kPad;
    __shared__ __align__(16) bf16 q_s[2][kTile * LD];
    __shared__ __align__(16) bf16 do_s[2][kTile * LD];
    __shared__ float lse_s[2][kTile], dot_s[2][kTile];

    const int key_tile = blockIdx.x, q_tiles = gridDim.x;
    const Head<HS> head(qkv, T, NH);
    const int C = head.C, stride = head.stride;
    const bf16 *q = head.q, *k = head.k, *v = head.v;
    const bf16* dO = dout + head.out_offset;
    lse += head.stats_offset;
    dot += head.stats_offset;
    const int key0 = key_tile * kTile;

    // k and v of the block's keys through the second buffer into registers; the first query tile
    // is the keys' own (no earlier query sees them).
    load_tile_async<HS>(q_s[1], k, stride, key0, T);
    load_tile_async<HS>(do_s[1], v, stride, key0, T);
    load_tile_async<HS>(q_s[0], q, stride, key0, T);
    load_tile_async<HS>(do_s[0], dO, C, key0, T);
    cp_async_commit();
    load_row_stats(lse_s[0], dot_s[0], lse, dot, key0, T);
    cp_async_wait<0>();
    __syncthreads();
    uint32_t k_frag[HS / 16][4], v_frag[HS / 16][4];
    load_warp_rows<HS>(k_frag, q_s[1]);
    load_warp_rows<HS>(v_frag, do_s[1]);
    __syncthreads();

    float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
    for (int q_tile = key_tile; q_tile < q_tiles; ++q_tile) {
        const int buf = (q_tile - key_tile) % 2;
        if (q_tile + 1 < q_tiles) {
            const int next0 = (q_tile + 1) * kTile;
            load_tile_async<HS>(q_s[1 - buf], q, stride, next0, T);
            load_tile_async<HS>(do_s[1 - buf], dO, C, next0, T);
            load_row_stats(lse_s[1 - buf], dot_s[1 - buf], lse, dot, next0, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        // Pᵀ, 16 keys x 64 queries
        float p[kTileCols][4];
        mma_rows_by_tile_transposed<HS>(p, k_frag, q_s[buf]);
        const bool diagonal = q_tile == key_tile;
        for (int n = 0; n < kTileCols; ++n)
            for (int e = 0; e < 4; ++e) {
                const int query = my_col(n, e);
                p[n][e] = diagonal && my_row(e / 2) > query ? 0.0f : exp2f(p[n][e] * scale_log2 - lse_s[buf][query]);
            }
        mma_accumulators_by_tile<HS>(dv, p, do_s[buf]);  // dv += Pᵀ·dout
        float dp[kTileCols][4];
        mma_rows_by_tile_transposed<HS>(dp, v_frag, do_s[buf]);  // dPᵀ = v·doutᵀ
        for (int n = 0; n < kTileCols; ++n)
            for (int e = 0; e < 4; ++e) p[n][e] *= dp[n][e] - dot_s[buf][my_col(n, e)];  // dSᵀ
        mma_accumulators_by_tile<HS>(dk, p, q_s[buf]);  // dk += dSᵀ·q
        __syncthreads();
    }

    const float dk_scale[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
    bf16* dq_head = dqkv + head.qkv_offset;
    store_rows<HS>(dq_head + C, stride, key0, T, dk, dk_scale);
    store_rows<HS>(dq_head + 2 * C, stride, key0, T, dv, one);
}

// One block: 64 queries of one (batch, head), against key tiles 0..its own, like the forward.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(bf16* dqkv, const bf16* qkv, const bf16* dout, const float* lse, const float* dot,
                             int T, int NH, float scale_log2, float scale) {
    constexpr int LD = HS + kPad;
    __shared__ __align__(16) bf16 k_s[2][kTile * LD];
    __shared__ __align__(16) bf16 v_s[2][kTile * LD];

    const int q_tile = gridDim.x - 1 - blockIdx.x;  // reversed as in the forward
    const Head<HS> head(qkv, T, NH);
    const int C = head.C, stride = head.stride;
    const bf16 *q = head.q, *k = head.k, *v = head.v;
    const bf16* dO = dout + head.out_offset;
    const int query0 = q_tile * kTile;

    load_tile_async<HS>(k_s[1], q, stride, query0, T);
    load_tile_async<HS>(v_s[1], dO, C, query0, T);
    load_tile_async<HS>(k_s[0], k, stride, 0, T);
    load_tile_async<HS>(v_s[0], v, stride, 0, T);
    cp_async_commit();
    float row_lse[2], row_dot[2];
    for (int half = 0; half < 2; ++half) {
        const int query = query0 + my_row(half);
        row_lse[half] = query < T ? lse[head.stats_offset + query] * kLog2e : INFINITY;
        row_dot[half] = query < T ? dot[head.stats_offset + query] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();
    uint32_t q_frag[HS / 16][4], do_frag[HS / 16][4];
    load_warp_rows<HS>(q_frag, k_s[1]);
    load_warp_rows<HS>(do_frag, v_s[1]);
    __syncthreads();

    float dq[HS / 8][4] = {};
    for (int j = 0; j <= q_tile; ++j) {
        const int buf = j % 2;
        if (j < q_tile) {
            load_tile_async<HS>(k_s[1 - buf], k, stride, (j + 1) * kTile, T);
            load_tile_async<HS>(v_s[1 - buf], v, stride, (j + 1) * kTile, T);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        float p[kTileCols][4];
        mma_rows_by_tile_transposed<HS>(p, q_frag, k_s[buf]);
        scale_and_mask(p, scale_log2, query0, j * kTile, j == q_tile);
        for (int n = 0; n < kTileCols; ++n)
            for (int e = 0; e < 4; ++e) p[n][e] = exp2f(p[n][e] - row_lse[e / 2]);  // masked: 2^-inf = 0
        float dp[kTileCols][4];
        mma_rows_by_tile_transposed<HS>(dp, do_frag, v_s[buf]);  // dP = dout·vᵀ
        for (int n = 0; n < kTileCols; ++n)
            for (int e = 0; e < 4; ++e) p[n][e] *= dp[n][e] - row_dot[e / 2];  // dS
        mma_accumulators_by_tile<HS>(dq, p, k_s[buf]);  // dq += dS·k
        __syncthreads();
    }

    const float dq_scale[2] = {scale, scale};
    store_rows<HS>(dqkv + head.qkv_offset, stride, query0, T, dq, dq_scale);
}

// ---- the op -----------------------------------------------------------------------------------------

// The op as it was; its head sizes, memory (D only as scratch) and checks are the stage's
// (FlashAttentionWith).
struct FlashAttention : FlashAttentionWith<32> {
    static constexpr const char* label = "before: 64 x 64 tiles, a dq kernel";
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, void* saved, const Act* qkv, int B, int T, int C, int NH,
                        void* /*scratch*/) {
        check_grid(B, NH);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            flash_forward_kernel<HS><<<grid(B, T, NH), kThreads, 0, ctx.stream>>>(
                out, static_cast<float*>(saved), qkv, T, NH, scale_log2(HS));
            LAUNCH_CHECK();
        });
    }

    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dqkv, const Act* dout, const Act* qkv, const Act* out,
                         const void* saved, int B, int T, int C, int NH, void* scratch) {
        check_grid(B, NH);
        const float* lse = static_cast<const float*>(saved);
        float* dot = static_cast<float*>(scratch);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            row_dot<HS>(ctx, dot, nullptr, out, dout, B, T, NH);
            const float scale = 1.0f / std::sqrt(float(HS));
            flash_backward_dkdv_kernel<HS><<<grid(B, T, NH), kThreads, 0, ctx.stream>>>(dqkv, qkv, dout, lse, dot, T,
                                                                                      NH, scale_log2(HS), scale);
            LAUNCH_CHECK();
            flash_backward_dq_kernel<HS><<<grid(B, T, NH), kThreads, 0, ctx.stream>>>(dqkv, qkv, dout, lse, dot, T, NH,
                                                                                    scale_log2(HS), scale);
            LAUNCH_CHECK();
        });
    }

  private:
    // One block per 64 rows (x) and per batch and head (y).
    static dim3 grid(int B, int T, int NH) { return dim3(cuda::ceil_div(T, kTile), B * NH); }
};

}  // namespace gpt::stage03::before


namespace gpt::bench {

struct FlashAttention16Rows : stage03::FlashAttentionWith<16> {
    static constexpr const char* label = "16 rows per warp";
};

struct FlashAttentionAtomicDq : stage03::FlashAttentionWith<32, stage03::kTile, stage03::kTile, true> {
    static constexpr const char* label = "atomic dq (FlashAttention-2's)";
};

struct FlashAttention128Keys : stage03::FlashAttentionWith<32, 2 * stage03::kTile, stage03::kTile> {
    static constexpr const char* label = "128 keys per dk/dv block";
};

struct FlashAttention128Queries : stage03::FlashAttentionWith<32, stage03::kTile, 2 * stage03::kTile> {
    static constexpr const char* label = "128 queries per dq block";
};

struct FlashAttention128Both : stage03::FlashAttentionWith<32, 2 * stage03::kTile, 2 * stage03::kTile> {
    static constexpr const char* label = "128 keys per dk/dv block, 128 queries per dq block";
};

template <>
struct AttentionVariants<stage03::FlashAttention> {
    using type = std::tuple<stage03::before::FlashAttention, FlashAttention16Rows, FlashAttentionAtomicDq,
                            FlashAttention128Keys, FlashAttention128Queries, FlashAttention128Both,
                            stage03::BasicFlashForward>;
};

}  // namespace gpt::bench
