// Stage 03: causal self-attention as one fused kernel per pass, in the style of FlashAttention-2.
//
// Stage 02 wrote the B x NH x T x T probabilities to memory and read them back three times.
// Here a block of 64 queries keeps its queries in registers and walks over the keys 64 at a
// time: scores of one 64 x 64 tile on the tensor cores, the online softmax (a running maximum
// and sum per row, the partial output rescaled whenever the maximum grows), then the tile's
// probabilities times V, straight from registers. Nothing of size T x T exists anywhere. The
// forward pass saves one number per row, the log-sum-exp of its scores; the backward pass
// recomputes every probability from it instead of reading them.
//
//   forward   flash_forward_kernel      out, lse        <- q, k, v            (one block: 64 queries)
//   backward  flash_row_dot_kernel      D = rowsum(dout * out)                (the softmax's backward needs it)
//             flash_backward_dkdv_kernel  dk, dv        <- q, k, v, dout, lse, D  (one block: 64 keys)
//             flash_backward_dq_kernel    dq            <- q, k, v, dout, lse, D  (one block: 64 queries)
//
// dq is made by its own kernel, which recomputes S and dP a second time (7 matrix products per
// pair of tiles, 4 in the dk/dv kernel and 3 here, instead of 5), rather than added up by every
// key block with atomic additions as in FlashAttention-2's single backward kernel. Each kernel is
// then a plain loop that is easier to read and to make an exercise of, and this op's dq comes out
// the same on every run. (A training step as a whole still is not bit-reproducible: other kernels
// add with atomics, the embedding's and the LayerNorm's parameter gradients among them.) The
// price is the two extra products; docs/03_flash_attention.md, "The backward pass", counts it.
//
// The kernels read q, k and v where the QKV projection wrote them (rows of 3C, head h at column
// h·HS of each third) and write out and dqkv in the same row layout, so no permute is needed.
// Matrix products are mma.sync.m16n8k16 (bf16 operands, fp32 sums; sm_80 and later), operands
// moved from shared memory to registers with ldmatrix. The chapter, docs/03_flash_attention.md,
// draws the tiles (docs/figures/attention_tiles.svg) and the fragments (mma_fragments.svg).
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
#include "util/error.h"

namespace gpt::stage03 {

constexpr int kTile = 64;              // queries per block (forward, dq); keys per tile and per dk/dv block
constexpr int kWarps = 4;              // each warp owns 16 of the block's 64 rows
constexpr int kThreads = 32 * kWarps;
constexpr int kPad = 8;                // bf16 after each shared row: rows 16 bytes off the banks' period
constexpr int kTileCols = kTile / 8;   // 8-wide column tiles of a 16 x 64 score tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- tensor-core building blocks ----------------------------------------------------------------
//
// mma.sync.m16n8k16 multiplies a 16 x 16 A by a 16 x 8 B into a 16 x 8 fp32 D, the operands spread
// over the 32 threads of a warp. Thread `lane` has g = lane / 4 and c = lane % 4 and holds (PTX ISA,
// "Matrix fragments for mma.m16n8k16"):
//   A  4 registers of 2 bf16: (row g, cols 2c, 2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..)
//   B  2 registers of 2 bf16: (rows 2c, 2c+1, col g), (rows 2c+8, 2c+9, col g)
//   D  4 floats: (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
// So the D of two neighbouring 8-column tiles is, once rounded to bf16, exactly the A of the next
// product: the probabilities never leave the registers (a_from_accumulators).

__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices from shared memory; lanes 8i..8i+7 give the row addresses of matrix i,
// and register i receives matrix i's (row g, cols 2c, 2c+1), or with .trans its (rows 2c, 2c+1, col g).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* row) {
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ inline uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half: the lower column
    return *reinterpret_cast<const uint32_t*>(&v);
}

// A tile of 64 rows in shared memory: row r at tile + r * ld, ld = HS + kPad elements.
// The A operand at rows row0..row0+15, columns col0..col0+15.
template <int LD>
__device__ inline void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4(a, tile + (row0 + lane % 8 + (lane / 8 % 2) * 8) * LD + col0 + (lane / 16) * 8);
}
// B operands of two 8-column tiles (n0 and n0+8), k = k0..k0+15, from a tile that holds B
// transposed, tile[n][k] (for q·kᵀ the tile of k: its rows are the product's columns).
// b[0], b[1]: columns n0..n0+7; b[2], b[3]: columns n0+8..n0+15.
template <int LD>
__device__ inline void load_b_transposed(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4(b, tile + (n0 + lane % 8 + (lane / 16) * 8) * LD + k0 + (lane / 8 % 2) * 8);
}
// The same from a tile that holds B as it is, tile[k][n] (for p·v the tile of v).
template <int LD>
__device__ inline void load_b(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4_trans(b, tile + (k0 + lane % 8 + (lane / 8 % 2) * 8) * LD + n0 + (lane / 16) * 8);
}

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

// The A operand of columns 16k..16k+15 of a 16 x 64 accumulator, rounded to bf16.
__device__ inline void a_from_accumulators(uint32_t (&a)[4], const float (&acc)[kTileCols][4], int k) {
    a[0] = pack_bf16(acc[2 * k][0], acc[2 * k][1]);
    a[1] = pack_bf16(acc[2 * k][2], acc[2 * k][3]);
    a[2] = pack_bf16(acc[2 * k + 1][0], acc[2 * k + 1][1]);
    a[3] = pack_bf16(acc[2 * k + 1][2], acc[2 * k + 1][3]);
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

// The four threads of a quad (same g) hold one row of an accumulator between them: a row's
// maximum or sum is cuda::warp_max<4> or cuda::warp_sum<4> (common/cuda/reduce.cuh).

// ---- moving tiles ---------------------------------------------------------------------------------

// cp.async: global to shared memory without passing through registers, so that the next tile
// loads while this one is computed on. A copy of 0 bytes fills the 16 bytes with zeros.
__device__ inline void cp_async_16(void* shared, const void* global, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most `n` of the most recent groups are still in flight.
template <int n>
__device__ inline void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
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
    // EXERCISE BEGIN stage03.online_softmax TESTS Kernels.AttentionForward|Kernels.AttentionBackward|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.MasterWeightsStayFp32|Model.GradientAccumulation|Model.CapturedStepMatchesUncaptured
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
    // EXERCISE END
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

// Where a block's (batch, head) = blockIdx.y lives: its q, k and v inside the QKV projection's
// output [B, T, 3C] (row stride 3C), its rows of out and dout in [B, T, C] (row stride C), its
// row statistics (lse, dot) in [B·NH, T]. The kernels read and write these layouts directly: no
// permute to [B, NH, T, HS] and back.
template <int HS>
struct Head {
    int C, stride;
    size_t qkv_offset, out_offset, stats_offset;
    const bf16 *q, *k, *v;
    __device__ Head(const bf16* qkv, int T, int NH) : C(NH * HS), stride(3 * NH * HS) {
        const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
        qkv_offset = size_t(b) * T * stride + h * HS;
        out_offset = size_t(b) * T * C + h * HS;
        stats_offset = size_t(bh) * T;
        q = qkv + qkv_offset;
        k = q + C;
        v = q + 2 * C;
    }
};

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

// ---- backward ---------------------------------------------------------------------------------------
//
// With P = softmax(S), S = q·kᵀ/sqrt(HS) and dP = dout·vᵀ:
//   dv = Pᵀ·dout      dS = P ∘ (dP − D),  D = rowsum(dout ∘ out)      dq = dS·k/sqrt(HS)      dk = dSᵀ·q/sqrt(HS)
// P is recomputed from the saved log-sum-exp: P = 2^(S·log2(e) − lse·log2(e)).

// D for every row (b, h, t), laid out like lse. HS/8 threads per row, 16 bytes each.
template <int HS>
__global__ void flash_row_dot_kernel(float* dot, const bf16* out, const bf16* dout, int B, int T, int NH) {
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
    }
    for (int offset = kLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (row < rows && i % kLanes == 0) dot[row] = sum;
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

        // EXERCISE BEGIN stage03.flash_backward_dq TESTS Kernels.AttentionBackward
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
        // EXERCISE END
        __syncthreads();
    }

    const float dq_scale[2] = {scale, scale};
    store_rows<HS>(dqkv + head.qkv_offset, stride, query0, T, dq, dq_scale);
}

// ---- the op -----------------------------------------------------------------------------------------

struct FlashAttention {
    static constexpr const char* source = __FILE__;
    // A head is a multiple of the mma's k = 16; beyond 64 the backward's accumulators no longer
    // fit in registers. GPT-2 uses 64 at every size; the micro and tiny test models 16 and 32.
    static constexpr int kHeadSizes[] = {16, 32, 64};
    static constexpr bool kSavesLogSumExp = true;  // all it saves; no T x T buffer, memory grows with T

    // Saved for backward: the log-sum-exp of every row, fp32, B x NH x T.
    static size_t saved_bytes(size_t B, size_t T, size_t, size_t NH, size_t) { return B * NH * T * sizeof(float); }
    // Scratch: D = rowsum(dout ∘ out), fp32, B x NH x T (backward only).
    static size_t scratch_bytes(size_t B, size_t T, size_t, size_t NH, size_t) { return B * NH * T * sizeof(float); }

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, void* saved, const Act* qkv, int B, int T, int C, int NH,
                        void* /*scratch*/) {
        static_assert(std::is_same_v<Act, bf16>, "flash attention runs on bf16 tensor cores (stages 02 and later)");
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
        static_assert(std::is_same_v<Act, bf16>, "flash attention runs on bf16 tensor cores (stages 02 and later)");
        const float* lse = static_cast<const float*>(saved);
        float* dot = static_cast<float*>(scratch);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            const size_t threads = size_t(B) * NH * T * (HS / 8);
            flash_row_dot_kernel<HS><<<cuda::ceil_div(threads, 256), 256, 0, ctx.stream>>>(dot, out, dout, B, T, NH);
            LAUNCH_CHECK();
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
    static float scale_log2(int HS) { return kLog2e / std::sqrt(float(HS)); }

    // One block per 64 rows (x) and per batch and head (y).
    static dim3 grid(int B, int T, int NH) {
        if (size_t(B) * NH > 65535)
            throw Error("flash attention: batch x heads = " + std::to_string(size_t(B) * NH) +
                        " is more than the 65535 blocks a grid's y dimension holds");
        return dim3(cuda::ceil_div(T, kTile), B * NH);
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

}  // namespace gpt::stage03
