// Stage 01: a matmul on TF32 tensor cores, written by hand with CUDA's WMMA API, to show what
// cuBLASLt does for this stage. The trainer never uses it (its matmuls stay on cuBLASLt); the
// tests check it (Kernels.MatmulOnTf32TensorCores) and bench_stage01 --matmul-variants yes
// times it beside cuBLASLt. Chapter: docs/01_tf32.md, "A TF32 matmul by hand".
//
// TF32 in bits: 1 sign, 8 exponent and 10 mantissa bits, 19 in all, kept in an ordinary 32-bit
// float whose low 13 mantissa bits the tensor core ignores. fp32's range, fp16's precision:
// rounding to it moves a number by up to 2^-11 of itself.
//
// What the tensor core does: one warp-wide instruction multiplies a 16 x 8 tile of A by an
// 8 x 16 tile of B (TF32 operands) and adds the 16 x 16 products into fp32 accumulators. WMMA
// names those tiles "fragments"; which thread holds which element of one is the hardware's
// business, so the code only loads, multiplies and stores whole fragments (wmma::load_matrix_sync,
// wmma::mma_sync, wmma::store_matrix_sync).
//
// The kernel: C[M x N] = A[M x K] · B[N x K]ᵀ (+ bias[N]), every matrix fp32 and row-major, the
// product stage 00's Matmul::forward computes (out = inp · weightᵀ + bias). A block of 4 warps
// computes a 64 x 64 tile of C, each warp a 32 x 32 quarter of it as 2 x 2 fragments. The block
// walks K 32 columns at a time: it copies the 64 x 32 slices of A and B it needs into shared
// memory (zeros past the matrices' edges, so any M, N, K work), then each warp multiplies them in
// 4 steps of 8, rounding each operand to TF32 as it loads it. At the end the accumulators go
// through shared memory to C, each element checked against the edges and given its bias.
//
// Why cuBLASLt is still much faster (a prediction; bench_stage01 --matmul-variants yes measures
// it). Each 64 x 32 slice of A and of B (16 KiB together) feeds 2·64·64·32 = 262,144 FLOPs: 16
// FLOPs per byte read. If every slice came from DRAM, 16 FLOP/B x 3.35 TB/s (the H100 data
// sheet's bandwidth) would cap the kernel at about 54 TFLOP/s, a ninth of the 495 TFLOP/s dense
// TF32 the same data sheet gives; the L2 cache serves part of the reads, so the cap is soft. And
// the block waits: it loads a slice, synchronises, multiplies, synchronises, with nothing loading
// while the tensor cores work. cuBLASLt's kernels take larger tiles (128 x 128 and up: 32 FLOPs
// per byte and more), load the next slice while multiplying the current one, and on Hopper use
// its warpgroup instructions (wgmma, fed by the TMA copy engine), which WMMA does not reach:
// WMMA compiles to Ampere's warp-level mma.sync. Predicted: several times slower than cuBLASLt at
// GPT-2's shapes.
#pragma once
#include <cuda_runtime.h>
#include <mma.h>

#include "cuda/backend.cuh"
#include "cuda/check.cuh"
#include "cuda/exercise.cuh"

namespace gpt::stage01 {

namespace wmma = nvcuda::wmma;

// The shape of one TF32 tensor-core product: A 16 x 8, B 8 x 16, C 16 x 16.
constexpr int kFragM = 16, kFragN = 16, kFragK = 8;
constexpr int kWarpTile = 32;                    // each warp: 32 x 32 of C, 2 x 2 fragments
constexpr int kFragsPerWarp = kWarpTile / kFragM;
constexpr int kBlockTile = 64;                   // each block: 64 x 64 of C, 2 x 2 warps
constexpr int kWarps = (kBlockTile / kWarpTile) * (kBlockTile / kWarpTile);
constexpr int kThreads = 32 * kWarps;
constexpr int kSliceK = 32;                      // columns of A and B staged per step
// Rows in shared memory are 4 floats longer than the data: successive rows then start in
// different memory banks. WMMA wants row lengths that are multiples of 4 floats (16 bytes) and
// fragments that start 32-byte aligned: 36 and 68 floats keep both.
constexpr int kSliceStride = kSliceK + 4;
constexpr int kTileStride = kBlockTile + 4;

using FragmentA = wmma::fragment<wmma::matrix_a, kFragM, kFragN, kFragK, wmma::precision::tf32, wmma::row_major>;
// B's rows are C's columns: B[N x K] row-major is Bᵀ[K x N] column-major, the layout read here.
using FragmentB = wmma::fragment<wmma::matrix_b, kFragM, kFragN, kFragK, wmma::precision::tf32, wmma::col_major>;
using Accumulator = wmma::fragment<wmma::accumulator, kFragM, kFragN, kFragK, float>;

// rows x kSliceK elements of a row-major matrix [rows_total x K] into shared memory, from row
// row0 and column k0; zeros where the slice reaches past the matrix. Consecutive threads read
// consecutive columns: one row's 32 floats are one 128-byte load.
__device__ inline void load_slice(float (*slice)[kSliceStride], const float* matrix, int rows_total, int K, int row0,
                                  int k0) {
    for (int i = threadIdx.x; i < kBlockTile * kSliceK; i += kThreads) {
        const int r = i / kSliceK, c = i % kSliceK;
        const int row = row0 + r, k = k0 + c;
        slice[r][c] = row < rows_total && k < K ? matrix[size_t(row) * K + k] : 0.0f;
    }
}

// C[M x N] = A[M x K] · B[N x K]ᵀ + bias[N] (bias may be null). Grid: ceil(N/64) x ceil(M/64)
// blocks of kThreads.
static __global__ void __launch_bounds__(kThreads)
    tf32_wmma_matmul_kernel(float* C, const float* A, const float* B, const float* bias, int M, int N, int K) {
    __shared__ __align__(128) float a_slice[kBlockTile][kSliceStride];
    __shared__ __align__(128) float b_slice[kBlockTile][kSliceStride];
    __shared__ __align__(128) float c_tile[kBlockTile][kTileStride];

    const int row0 = blockIdx.y * kBlockTile, col0 = blockIdx.x * kBlockTile;  // the block's tile of C
    const int warp = threadIdx.x / 32;
    const int warp_row = (warp / 2) * kWarpTile, warp_col = (warp % 2) * kWarpTile;  // the warp's, in it

    Accumulator acc[kFragsPerWarp][kFragsPerWarp];
    for (int i = 0; i < kFragsPerWarp; ++i)
        for (int j = 0; j < kFragsPerWarp; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += kSliceK) {
        load_slice(a_slice, A, M, K, row0, k0);
        load_slice(b_slice, B, N, K, col0, k0);
        __syncthreads();  // the slices are complete

        // EXERCISE BEGIN stage01.tf32_tensor_cores TESTS Kernels.MatmulOnTf32TensorCores
        for (int kk = 0; kk < kSliceK; kk += kFragK) {
            FragmentA a[kFragsPerWarp];
            FragmentB b[kFragsPerWarp];
            for (int i = 0; i < kFragsPerWarp; ++i) {
                wmma::load_matrix_sync(a[i], &a_slice[warp_row + i * kFragM][kk], kSliceStride);
                for (int e = 0; e < a[i].num_elements; ++e) a[i].x[e] = wmma::__float_to_tf32(a[i].x[e]);
            }
            for (int j = 0; j < kFragsPerWarp; ++j) {
                wmma::load_matrix_sync(b[j], &b_slice[warp_col + j * kFragN][kk], kSliceStride);
                for (int e = 0; e < b[j].num_elements; ++e) b[j].x[e] = wmma::__float_to_tf32(b[j].x[e]);
            }
            for (int i = 0; i < kFragsPerWarp; ++i)
                for (int j = 0; j < kFragsPerWarp; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        // EXERCISE END
        __syncthreads();  // every warp is done with the slices before the next step overwrites them
    }

    // Through shared memory: a fragment's elements sit in registers in an order only the hardware
    // knows, so store_matrix_sync lays them out as a matrix first, then each thread writes C.
    for (int i = 0; i < kFragsPerWarp; ++i)
        for (int j = 0; j < kFragsPerWarp; ++j)
            wmma::store_matrix_sync(&c_tile[warp_row + i * kFragM][warp_col + j * kFragN], acc[i][j], kTileStride,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < kBlockTile * kBlockTile; i += kThreads) {
        const int r = i / kBlockTile, c = i % kBlockTile;
        const int row = row0 + r, col = col0 + c;
        if (row < M && col < N) C[size_t(row) * N + col] = c_tile[r][c] + (bias ? bias[col] : 0.0f);
    }
}

// The kernel as an op with the forward of stage 00's Matmul (out = inp · weightᵀ + bias), fp32
// in memory. Not a policy's Matmul: it has no backward.
struct Tf32WmmaMatmul {
    static constexpr const char* label = "TF32 wmma by hand";
    static constexpr const char* source = __FILE__;

    // out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]  (bias may be null)
    static void forward(CudaBackend::Context& ctx, float* out, const float* inp, const float* weight,
                        const float* bias, int N, int C, int OC) {
        if (N == 0 || OC == 0) return;
        const dim3 grid(cuda::ceil_div(size_t(OC), kBlockTile), cuda::ceil_div(size_t(N), kBlockTile));
        tf32_wmma_matmul_kernel<<<grid, kThreads, 0, ctx.stream>>>(out, inp, weight, bias, N, OC, C);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage01
