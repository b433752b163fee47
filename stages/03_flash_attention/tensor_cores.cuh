// The building blocks of stage 03's attention kernels (flash_attention.cuh): one tensor-core
// product, moving 8 x 8 pieces of a shared-memory tile into the registers the product reads, and
// copying rows of q, k, v from global to shared memory without passing through registers.
//
// mma.sync.m16n8k16 multiplies a 16 x 16 A by a 16 x 8 B into a 16 x 8 fp32 D, the operands spread
// over the 32 threads of a warp. Thread `lane` has g = lane / 4 and c = lane % 4 and holds (PTX ISA,
// "Matrix fragments for mma.m16n8k16"):
//   A  4 registers of 2 bf16: (row g, cols 2c, 2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..)
//   B  2 registers of 2 bf16: (rows 2c, 2c+1, col g), (rows 2c+8, 2c+9, col g)
//   D  4 floats: (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
// So the D of two neighbouring 8-column tiles is, once rounded to bf16, exactly the A of the next
// product: probabilities never leave the registers (a_from_accumulators in flash_attention.cuh).
// docs/03b_flash_attention_tensor_cores.md, "The tensor-core fragments", draws them
// (docs/figures/mma_fragments.svg).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/types.cuh"

namespace gpt::stage03 {

// Shared-memory rows are HS + kPad elements long: 16 bytes more than the data, so that the eight
// rows an ldmatrix reads start in different banks.
constexpr int kPad = 8;

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

// ---- operands from a shared tile, row r at tile + r * LD ---------------------------------------

// The A operand at rows row0..row0+15, columns col0..col0+15 of the tile.
template <int LD>
__device__ inline void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4(a, tile + (row0 + lane % 8 + (lane / 8 % 2) * 8) * LD + col0 + (lane / 16) * 8);
}
// The same from a tile that holds A transposed, tile[col][row] (the atomic-dq variant's dS, stored
// as dSᵀ).
template <int LD>
__device__ inline void load_a_transposed(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4_trans(a, tile + (col0 + lane % 8 + (lane / 16) * 8) * LD + row0 + (lane / 8 % 2) * 8);
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

// ---- global to shared memory --------------------------------------------------------------------

// cp.async: global to shared memory without passing through registers, so that the next tile
// loads while this one is computed on. A copy of 0 bytes fills the 16 bytes with zeros.
__device__ inline void cp_async_16(void* shared, const void* global, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global), "r"(valid ? 16 : 0)
                 : "memory");
}
// The copies a thread asked for since the last commit form one group.
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most `n` of this thread's most recent groups are still in flight.
template <int n>
__device__ inline void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory");
}

// Rows row0..row0+kRows-1 of one head (HS elements at `head`, rows `stride` elements apart) into a
// shared tile of rows HS + kPad long, by the kThreads threads of the block; rows at or past T
// become zeros (they are masked or not stored, but 0 · garbage could be NaN). The number of
// 16-byte copies per thread is a constant, so the loop unrolls into straight-line copies.
template <int HS, int kRows, int kThreads>
__device__ inline void load_rows_async(bf16* tile, const bf16* head, int stride, int row0, int T) {
    constexpr int kChunks = HS / 8, kPieces = kRows * kChunks;  // 16-byte pieces per row, per tile
#pragma unroll
    for (int it = 0; it < (kPieces + kThreads - 1) / kThreads; ++it) {
        const int i = threadIdx.x + it * kThreads;
        if (kPieces % kThreads != 0 && i >= kPieces) break;  // only where the threads outnumber the pieces
        const int r = i / kChunks, col = (i % kChunks) * 8, row = row0 + r;
        const bool valid = row < T;
        cp_async_16(tile + r * (HS + kPad) + col, head + size_t(valid ? row : 0) * stride + col, valid);
    }
}

// Where one (batch, head), blockIdx.y, lives: q, k and v where the QKV projection wrote them (rows
// of 3C, head h at column h·HS of each third), out and dout in rows of C, per-row numbers (lse, D)
// in [B, NH, T] order, the atomic-dq variant's fp32 sums of dq in [B, NH, T, HS].
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

}  // namespace gpt::stage03
