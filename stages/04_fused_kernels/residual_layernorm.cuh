// Stage 04: LayerNorm as one warp per row, fused with the residual add before it (forward) and
// with its parameter gradients (backward).
//
// Stage 00 gave each row to one thread: neighbouring threads read addresses C apart, so every
// load touched a different 32-byte sector and the kernels ran at a few percent of the memory
// bandwidth. Here the 32 lanes of a warp share a row and read it in 16-byte packs (8 bf16 or
// 4 floats), side by side; both passes are memory-bound, so what counts is the bytes moved
// (a = sizeof(Act)):
//
//   forward   unfused: Residual reads a, b and writes the residual (3·a·N·C); LayerNorm reads
//             the residual back and writes out (2·a·N·C). Fused: the sum is stored and
//             normalised while it is still in registers, 4·a·N·C: one read of the residual
//             saved (25 MB per call for d12 in bf16 at B·T = 16384), and one launch.
//   backward  unfused: the input gradient reads dout, x and dinp and writes dinp (4·a·N·C), then
//             the parameter gradients read dout and x from memory again (2·a·N·C). Fused: one
//             kernel sums dweight and dbias on its way through the rows, 4·a·N·C. A lane keeps
//             its packs of x and dout in registers from its first pass over a row to the second
//             (rows up to 768 wide in bf16), so the kernel reads each of them once; a longer row
//             is read again, from the L1/L2 cache. Predicted, not measured: within 15% of the
//             copy bandwidth for its bytes (101 MB per call at C = 768, B·T = 16384: 0.033 ms at
//             the 3,012 GB/s of docs/results/2026-11-23_h100, at most 0.039 ms).
//
// The arithmetic is stage 00's: mean first, then the mean of squared deviations (biased), in
// float, eps = stage00::kLayerNormEps; the backward ADDS into dinp, dweight and dbias.
//
//   forward   residual_layernorm_forward_kernel   [residual = a + b,] out, mean, rstd   a warp per row
//   backward  layernorm_backward_kernel           dinp +=, dweight +=, dbias +=          a warp per row,
//                                                                                      a block many rows
#pragma once
#include <algorithm>
#include <string>

#include "../00_fp32_baseline/layernorm.cuh"  // kLayerNormEps
#include "cuda/backend.cuh"
#include "cuda/exercise.cuh"
#include "cuda/reduce.cuh"
#include "util/error.h"

namespace gpt::stage04 {

constexpr int kWarps = 8;  // warps per block; in the forward, rows per block
constexpr int kThreads = 32 * kWarps;
// Packs (16 bytes when vectorised) per lane held in registers across a kernel's passes. The
// forward keeps its row there (C up to 1024 in bf16, 512 in float; longer rows are read again).
// The backward keeps there the column sums of dweight and dbias (2·kVec floats a pack: 64
// registers for 4 packs in bf16) and, for rows of up to kBackwardCachedPacks packs a lane, the
// row's x and dout too (C up to 768 in bf16: GPT-2 124M's width). Two blocks of 256 threads fit
// on an SM at up to 128 registers a thread: both at 4 packs would take 190 on sm_90 and halve
// the warps an SM holds, at 3 they take 128 (ptxas -v; docs/04_fused_kernels.md has the table).
constexpr int kForwardCachedPacks = 4;
constexpr int kBackwardSummedPacks = 4;
constexpr int kBackwardCachedPacks = 3;

// Calls f(k, i) for the packs i = lane + 32·k of a row that this lane handles: neighbouring
// lanes, neighbouring packs, so each access of the warp is one contiguous stretch (512 bytes in
// 16-byte packs), and a lane gets the same packs in every pass and every row. With kUnrolled > 0
// the loop is unrolled, k is a constant and arrays indexed by k live in registers (the row must
// then have at most 32·kUnrolled packs); with kUnrolled == 0 it walks a row of any length.
template <int kUnrolled, class F>
__device__ inline void for_each_pack(int lane, int packs, F&& f) {
    if constexpr (kUnrolled > 0) {
#pragma unroll
        for (int k = 0; k < kUnrolled; ++k)
            if (lane + 32 * k < packs) f(k, lane + 32 * k);
    } else {
#pragma unroll 1  // one pack at a time: other warps hide the latency (unrolled, it spilled)
        for (int i = lane; i < packs; i += 32) f(0, i);
    }
}

// ---- forward ------------------------------------------------------------------------------------

// One warp per row: x = a (plain LayerNorm) or x = a + b rounded to Act and stored to `residual`
// (kWithResidual); out = (x - mean) * rstd * weight + bias, with mean and rstd saved. The row is
// normalised as it is stored, rounding included, so the backward (which reads the stored
// residual) sees the same x. No __syncthreads: a warp whose row is past N just leaves.
template <class Act, int kVec, int kCached, bool kWithResidual>
__global__ void __launch_bounds__(kThreads)
    residual_layernorm_forward_kernel(Act* residual, Act* out, float* mean, float* rstd, const Act* a,
                                      const Act* b, const Act* weight, const Act* bias, int N, int C) {
    using P = Pack<Act, kVec>;
    // What the exercise below uses ([[maybe_unused]]: while it is a stub, nothing does).
    [[maybe_unused]] const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kWarps + threadIdx.x / 32;
    if (n >= N) return;  // the whole warp: warp_sum below needs all 32 lanes
    const size_t row = size_t(n) * C;
    [[maybe_unused]] const int packs = C / kVec;  // packs of kVec elements (16 bytes when kVec > 1)
    // Without a cache each pass reads the row again: the stored residual (this lane wrote those
    // very packs in pass 1, so it reads its own writes) or the input.
    [[maybe_unused]] P cache[kCached > 0 ? kCached : 1];
    [[maybe_unused]] const Act* x = kWithResidual ? residual + row : a + row;

    // EXERCISE BEGIN stage04.warp_layernorm TESTS Kernels.LayerNormForward|Slots.ResidualLayerNormForward|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.CachedGenerationMatchesTheFullForward|Model.MasterWeightsStayFp32|Model.GradientAccumulation|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero
    // Pass 1: the row (adding and storing the residual on the way) and its sum.
    float sum = 0.0f;
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        if constexpr (kWithResidual) {
            const P pa = load_pack<P>(a + row, i), pb = load_pack<P>(b + row, i);
#pragma unroll
            for (int j = 0; j < kVec; ++j) v.v[j] = from_float<Act>(to_float(pa.v[j]) + to_float(pb.v[j]));
            store_pack(residual + row, i, v);
        } else {
            v = load_pack<P>(a + row, i);
        }
        if constexpr (kCached > 0) cache[k] = v;
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum += to_float(v.v[j]);
    });
    const float m = cuda::warp_sum(sum) / C;

    // Pass 2: the variance from squared deviations (not E[x²] - m², which cancels badly).
    float sq = 0.0f;
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        if constexpr (kCached > 0) v = cache[k];
        else v = load_pack<P>(x, i);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const float d = to_float(v.v[j]) - m;
            sq += d * d;
        }
    });
    const float s = rsqrtf(cuda::warp_sum(sq) / C + stage00::kLayerNormEps);

    // Pass 3: normalise, scale and shift.
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        if constexpr (kCached > 0) v = cache[k];
        else v = load_pack<P>(x, i);
        const P w = load_pack<P>(weight, i), bb = load_pack<P>(bias, i);
        P o;
#pragma unroll
        for (int j = 0; j < kVec; ++j)
            o.v[j] = from_float<Act>((to_float(v.v[j]) - m) * s * to_float(w.v[j]) + to_float(bb.v[j]));
        store_pack(out + row, i, o);
    });
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
    // EXERCISE END
}

// ---- backward -----------------------------------------------------------------------------------

// Where column c = i·kVec + j (element j of pack i) keeps its partial sums in shared memory:
// element-major, so that the 32 lanes of a warp, which hold 32 neighbouring packs, add into 32
// neighbouring floats (32 different banks) instead of floats kVec apart.
__device__ inline int partial_slot(int i, int j, int packs) { return j * packs + i; }

// One kernel for all three gradients, each row of dout and x read from memory once:
//   dinp[n,c]  += rstd · (g - mean_c(g) - xhat · mean_c(g · xhat)),  g = dout · weight, xhat = (x - mean) · rstd
//   dweight[c] += Σ_n dout · xhat,   dbias[c] += Σ_n dout
// Each warp takes rows n, n + 8·gridDim.x, ... and the grid is only as large as fits on the GPU
// at once, so a block sees many rows: the column sums build up in the block (registers, then
// shared memory) and reach global memory with one atomicAdd per column per block, not per row.
// A row's own sums (the mean_c) need only its warp, since mean and rstd come saved from the forward.
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
            const P x = load_pack<P>(inp + row, i), d = load_pack<P>(dout + row, i), w = load_pack<P>(weight, i);
            if constexpr (kCached) {
                x_cache[k] = x;
                d_cache[k] = d;
            }
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float xhat = (to_float(x.v[j]) - m) * s, dj = to_float(d.v[j]), g = dj * to_float(w.v[j]);
                g_sum += g;
                gx_sum += g * xhat;
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
        // Without the cache, x and dout are read again, from L1/L2 (the warp has just read them).
        for_each_pack<kSummed>(lane, packs, [&](int k, int i) {
            P x, d;
            if constexpr (kCached) {
                x = x_cache[k];
                d = d_cache[k];
            } else {
                x = load_pack<P>(inp + row, i);
                d = load_pack<P>(dout + row, i);
            }
            const P w = load_pack<P>(weight, i);
            P dx = load_pack<P>(dinp + row, i);
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
                const float xhat = (to_float(x.v[j]) - m) * s, g = to_float(d.v[j]) * to_float(w.v[j]);
                dx.v[j] = from_float<Act>(to_float(dx.v[j]) + s * (g - g_mean - xhat * gx_mean));
            }
            store_pack(dinp + row, i, dx);
        });
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

// 16-byte packs need every row on a 16-byte boundary: the base pointers aligned (aligned16,
// common/cuda/types.cuh), C a multiple of the pack.
template <bool kWithResidual, class Act>
void launch_layernorm_forward(cudaStream_t stream, Act* residual, Act* out, float* mean, float* rstd, const Act* a,
                              const Act* b, const Act* weight, const Act* bias, int N, int C) {
    if (N == 0) return;  // a grid of 0 blocks is a launch error
    constexpr int kVec = 16 / sizeof(Act);
    const bool packed = C % kVec == 0 && aligned16(residual) && aligned16(out) && aligned16(a) && aligned16(b) &&
                        aligned16(weight) && aligned16(bias);
    const auto kernel = !packed ? residual_layernorm_forward_kernel<Act, 1, 0, kWithResidual>
                        : C <= 32 * kVec * kForwardCachedPacks
                            ? residual_layernorm_forward_kernel<Act, kVec, kForwardCachedPacks, kWithResidual>
                            : residual_layernorm_forward_kernel<Act, kVec, 0, kWithResidual>;
    kernel<<<cuda::ceil_div(N, kWarps), kThreads, 0, stream>>>(residual, out, mean, rstd, a, b, weight, bias, N, C);
    LAUNCH_CHECK();
}

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

struct LayerNorm {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                        const Act* weight, const Act* bias, int N, int C) {
        launch_layernorm_forward<false>(ctx.stream, static_cast<Act*>(nullptr), out, mean, rstd, inp,
                                        static_cast<const Act*>(nullptr), weight, bias, N, C);
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
        launch_layernorm_forward<true>(ctx.stream, residual, out, mean, rstd, a, b, weight, bias, N, C);
    }
    template <class Ctx, class Act>
    static void backward(Ctx& ctx, Act* dresidual, float* dweight, float* dbias, const Act* dout,
                         const Act* residual, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        LayerNorm::backward(ctx, dresidual, dweight, dbias, dout, residual, weight, mean, rstd, N, C);
    }
};

}  // namespace gpt::stage04
