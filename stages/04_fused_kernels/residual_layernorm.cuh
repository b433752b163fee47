// Stage 04: each residual add fused with the LayerNorm after it (forward), and LayerNorm's three
// gradients in one kernel (backward). Stage 00's LayerNorm already gives each row a warp and
// reads it in 16-byte packs; what changes here is how many times the data crosses memory
// (a = sizeof(Act)):
//
//   forward   unfused: Residual reads a, b and writes the residual (3·a·N·C); LayerNorm reads
//             the residual back and writes out (2·a·N·C). Fused: stage 00's kernel, given rows
//             that are made (a + b, rounded to Act) and stored as it first reads them, normalises
//             the sum while it is still in registers, 4·a·N·C: one read of the residual saved
//             (25 MB per call for d12 in bf16 at B·T = 16384), and one launch.
//   backward  unfused (stage 00): the input gradient reads dout, x and dinp and writes dinp
//             (4·a·N·C), then the parameter gradients read dout and x from memory again
//             (2·a·N·C). Fused: one kernel sums dweight and dbias on its way through the rows,
//             4·a·N·C. A lane keeps its packs of x and dout in registers from its first pass over
//             a row to the second (rows up to 768 wide in bf16), so the kernel reads each of them
//             once; a longer row is read again, from the L1/L2 cache. Predicted, not measured:
//             within 15% of the copy bandwidth for its bytes (101 MB per call at C = 768,
//             B·T = 16384: 0.033 ms at the 3,012 GB/s of docs/results/2026-11-23_h100, at most
//             0.039 ms).
//
// The arithmetic is stage 00's; the backward ADDS into dinp, dweight and dbias.
//
//   forward   stage00::layernorm_forward_kernel  residual = a + b, out, mean, rstd   a warp per row
//             with ResidualRows
//   backward  layernorm_backward_kernel          dinp +=, dweight +=, dbias +=      a warp per row,
//                                                                                 a block many rows
#pragma once
#include <algorithm>
#include <string>

#include "../00_fp32_baseline/layernorm.cuh"
#include "cuda/backend.cuh"
#include "cuda/reduce.cuh"
#include "util/error.h"

namespace gpt::stage04 {

using stage00::for_each_pack;
using stage00::kThreads;
using stage00::kWarps;

// Packs per lane held in registers by the backward: the column sums of dweight and dbias
// (2·kVec floats a pack: 64 registers for 4 packs in bf16) and, for rows of up to
// kBackwardCachedPacks packs a lane, the row's x and dout too (C up to 768 in bf16: GPT-2 124M's
// width). Two blocks of 256 threads fit on an SM at up to 128 registers a thread: both at 4 packs
// would take 190 on sm_90 and halve the warps an SM holds, at 3 they take 128 (ptxas -v;
// docs/appendices/04_fused_kernels.md has the table).
constexpr int kBackwardSummedPacks = 4;
constexpr int kBackwardCachedPacks = 3;

// ---- forward ------------------------------------------------------------------------------------

// The rows stage 00's LayerNorm forward reads, made on the way: x = a + b, rounded to Act and
// stored to `residual` as each pack is first read. A later pass reads the stored residual back
// (this lane wrote those very packs, so it reads its own writes); the backward reads it too, so
// it sees the same x, rounding included.
template <class Act>
struct ResidualRows {
    Act* residual;
    const Act* a;
    const Act* b;

    template <int kVec>
    __device__ void read(size_t row, int i, Pack<Act, kVec>& v) const {
        using P = Pack<Act, kVec>;
        const P pa = load_pack<P>(a + row, i), pb = load_pack<P>(b + row, i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) v.v[j] = from_float<Act>(to_float(pa.v[j]) + to_float(pb.v[j]));
        store_pack(residual + row, i, v);
    }
    template <int kVec>
    __device__ void read_again(size_t row, int i, Pack<Act, kVec>& v) const {
        v = load_pack<Pack<Act, kVec>>(residual + row, i);
    }
    bool aligned() const { return aligned16(residual) && aligned16(a) && aligned16(b); }
};

// ---- backward -----------------------------------------------------------------------------------

// Where column c = i·kVec + j (element j of pack i) keeps its partial sums in shared memory:
// element-major, so that the 32 lanes of a warp, which hold 32 neighbouring packs, add into 32
// neighbouring floats (32 different banks) instead of floats kVec apart.
__device__ inline int partial_slot(int i, int j, int packs) { return j * packs + i; }

// One kernel for all three gradients, each row of dout and x read from memory once: stage 00's
// input gradient (its two passes over a row: add_row_sums, then add_input_gradient), with
//   dweight[c] += Σ_n dout · xhat,   dbias[c] += Σ_n dout
// summed in pass 1. Each warp takes rows n, n + 8·gridDim.x, ... and the grid is only as large
// as fits on the GPU at once, so a block sees many rows: the column sums build up in the block
// (registers, then shared memory) and reach global memory with one atomicAdd per column per
// block, not per row.
// __launch_bounds__(kThreads, 2): two blocks an SM, so at most 128 registers a thread; a
// compiler that needs more must spill (which ptxas reports) rather than halve the warps quietly.
template <class Act, int kVec, int kSummed, bool kCached>
__global__ void __launch_bounds__(kThreads, 2)
    layernorm_backward_kernel(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                              const Act* weight, const float* mean, const float* rstd, int N, int C) {
    static_assert(!kCached || kSummed > 0, "a row in registers is a row of at most 32·kSummed packs");
    using P = Pack<Act, kVec>;
    extern __shared__ float partial[];  // 2·C floats: the block's sums for dweight, then for dbias
    float* partial_dw = partial;
    float* partial_db = partial + C;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int packs = C / kVec;

    for (int t = threadIdx.x; t < 2 * C; t += blockDim.x) partial[t] = 0.0f;
    __syncthreads();

    // A lane handles the same columns in every row, so it can keep its columns' sums in
    // registers across all its rows and add them to the block's once, at the end (kSummed > 0).
    // Rows too long for that, or not in packs, are added into shared memory row by row.
    [[maybe_unused]] float sum_dw[kSummed > 0 ? kSummed : 1][kVec] = {};
    [[maybe_unused]] float sum_db[kSummed > 0 ? kSummed : 1][kVec] = {};

    // kCached: the lane's packs of x and dout, kept from pass 1 for pass 2 as the forward keeps
    // its row, so that the kernel reads each of them once. The weights are read again in pass 2:
    // one row of them serves all the block's rows, so they stay in L1.
    [[maybe_unused]] P x_cache[kCached ? kSummed : 1], d_cache[kCached ? kSummed : 1];

    // No __syncthreads inside: the loop's trip count differs between warps (all lanes of a warp
    // take the same rows, so warp_sum sees 32 lanes).
    for (int n = blockIdx.x * kWarps + warp; n < N; n += gridDim.x * kWarps) {
        const size_t row = size_t(n) * C;
        const float m = mean[n], s = rstd[n];

        // Pass 1: the row's two sums for dinp, and the columns' sums for dweight and dbias.
        float g_sum = 0.0f, gx_sum = 0.0f;
        for_each_pack<kSummed>(lane, packs, [&](int k, int i) {
            const P x = load_pack<P>(inp + row, i), d = load_pack<P>(dout + row, i);
            if constexpr (kCached) {
                x_cache[k] = x;
                d_cache[k] = d;
            }
            stage00::add_row_sums(g_sum, gx_sum, x, d, load_pack<P>(weight, i), m, s);
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float xhat = (to_float(x.v[j]) - m) * s, dj = to_float(d.v[j]);
                if constexpr (kSummed > 0) {
                    sum_dw[k][j] += dj * xhat;
                    sum_db[k][j] += dj;
                } else {
                    // other warps of the block add into the same columns: shared atomics
                    atomicAdd(&partial_dw[partial_slot(i, j, packs)], dj * xhat);
                    atomicAdd(&partial_db[partial_slot(i, j, packs)], dj);
                }
            }
        });
        const float g_mean = cuda::warp_sum(g_sum) / C, gx_mean = cuda::warp_sum(gx_sum) / C;

        // Pass 2: add this branch's gradient into dinp (it already holds the residual stream's).
        stage00::add_input_gradient<kSummed, kCached>(dinp, inp, dout, weight, row, lane, packs, x_cache, d_cache, m,
                                                      s, g_mean, gx_mean);
    }

    if constexpr (kSummed > 0) {
        for_each_pack<kSummed>(lane, packs, [&](int k, int i) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                atomicAdd(&partial_dw[partial_slot(i, j, packs)], sum_dw[k][j]);
                atomicAdd(&partial_db[partial_slot(i, j, packs)], sum_db[k][j]);
            }
        });
    }
    __syncthreads();  // every warp's sums are in `partial`
    // One atomicAdd per column per block; neighbouring threads, neighbouring columns.
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int t = partial_slot(c / kVec, c % kVec, packs);
        atomicAdd(&dweight[c], partial_dw[t]);
        atomicAdd(&dbias[c], partial_db[t]);
    }
}

// ---- host side ----------------------------------------------------------------------------------

template <class Act>
void launch_layernorm_backward(cudaStream_t stream, Act* dinp, float* dweight, float* dbias, const Act* dout,
                               const Act* inp, const Act* weight, const float* mean, const float* rstd, int N,
                               int C) {
    if (N == 0) return;
    constexpr int kVec = 16 / sizeof(Act);
    const bool packed = C % kVec == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
    const auto kernel = !packed ? layernorm_backward_kernel<Act, 1, 0, false>
                        : C <= 32 * kVec * kBackwardCachedPacks
                            ? layernorm_backward_kernel<Act, kVec, kBackwardCachedPacks, true>
                        : C <= 32 * kVec * kBackwardSummedPacks
                            ? layernorm_backward_kernel<Act, kVec, kBackwardSummedPacks, false>
                            : layernorm_backward_kernel<Act, kVec, 0, false>;
    const size_t shared_bytes = 2 * size_t(C) * sizeof(float);
    if (shared_bytes > 48 * 1024)  // the default limit; GPT-2's widest model (C = 1600) takes 12.5 KiB
        throw Error("LayerNorm backward: C = " + std::to_string(C) + " needs more than 48 KiB of shared memory");
    // No more blocks than are resident at once, so that each block sums many rows.
    const unsigned grid = std::min(cuda::ceil_div(N, kWarps), cuda::one_wave(kernel, kThreads, shared_bytes));
    kernel<<<grid, kThreads, shared_bytes, stream>>>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    LAUNCH_CHECK();
}

// Stage 00's forward (a warp per row), the fused backward.
struct LayerNorm {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                        const Act* weight, const Act* bias, int N, int C) {
        stage00::LayerNorm::forward(ctx, out, mean, rstd, inp, weight, bias, N, C);
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        launch_layernorm_backward(ctx.stream, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    }
};

// The fusion slot (common/train/compose.h): residual = a + b, then out = layernorm(residual), in
// one kernel. The add's backward is free, so the backward is LayerNorm's, adding into dresidual.
struct ResidualLayerNorm {
    static constexpr const char* source = __FILE__;

    template <class Ctx, class Act>
    static void forward(Ctx& ctx, Act* residual, Act* out, float* mean, float* rstd, const Act* a, const Act* b,
                        const Act* weight, const Act* bias, int N, int C) {
        stage00::launch_layernorm_forward(ctx.stream, out, mean, rstd, ResidualRows<Act>{residual, a, b}, weight,
                                          bias, N, C);
    }
    template <class Ctx, class Act>
    static void backward(Ctx& ctx, Act* dresidual, float* dweight, float* dbias, const Act* dout,
                         const Act* residual, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        LayerNorm::backward(ctx, dresidual, dweight, dbias, dout, residual, weight, mean, rstd, N, C);
    }
};

}  // namespace gpt::stage04
