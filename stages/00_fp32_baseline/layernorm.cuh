// Stage 00: LayerNorm, a warp per row. Statistics are always computed in float, whatever the
// activation type (stage 02 relies on that).
//
// The first version anyone writes gives each row to one thread (tests/bench/first_versions.cuh
// keeps it, as a benchmark variant): neighbouring threads then read addresses C apart, every
// load touches a different 32-byte sector, and the kernels run at a few percent of the memory
// bandwidth. Here the 32 lanes of a warp share a row and read it side by side, in 16-byte packs
// (4 floats or 8 bf16), so that each load of the warp is one contiguous 512-byte stretch. Both
// kernels are memory-bound: what counts is the bytes they move.
//
//   forward           layernorm_forward_kernel           out, mean, rstd            a warp per row
//   backward (input)  layernorm_backward_input_kernel    dinp +=                    a warp per row
//   backward (params) layernorm_backward_params_kernel   dweight +=, dbias +=       a thread per column
#pragma once
#include "cuda/backend.cuh"
#include "cuda/exercise.cuh"
#include "cuda/reduce.cuh"
#include "elementwise.cuh"  // kRowsPerChunk

namespace gpt::stage00 {

constexpr float kLayerNormEps = 1e-5f;

constexpr int kWarps = 8;  // warps per block: rows per block
constexpr int kThreads = 32 * kWarps;
// Packs per lane kept in registers from a kernel's first pass over a row to the next: rows up
// to 32 · 6 packs of 4 floats (768, GPT-2 124M's width) or 32 · 4 packs of 8 bf16 (1024). A
// longer row is read again, from the L1/L2 cache. More packs in bf16 would cost the forward a
// quarter of its warps on sm_90 (70 registers a thread instead of 56, ptxas -v) for rows that
// GPT-2 124M does not have.
template <class Act>
constexpr int kCachedPacks = sizeof(Act) == 4 ? 6 : 4;

// Calls f(k, i) for the packs i = lane + 32·k of a row that this lane handles: neighbouring
// lanes, neighbouring packs, so each access of the warp is one contiguous stretch, and a lane
// gets the same packs in every pass and every row. With kUnrolled > 0 the loop is unrolled, k is
// a constant and arrays indexed by k live in registers (the row must then have at most
// 32·kUnrolled packs); with kUnrolled == 0 it walks a row of any length.
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

// Where the forward's rows come from: here, row n of `inp`. read() gives pack i of the row the
// first time, read_again() in a later pass. (Stage 04 passes rows that are the sum of two
// inputs, made and stored as they are first read: the residual add fused into this kernel.)
template <class Act>
struct InputRows {
    const Act* inp;

    template <class P>
    __device__ void read(size_t row, int i, P& v) const {
        v = load_pack<P>(inp + row, i);
    }
    template <class P>
    __device__ void read_again(size_t row, int i, P& v) const {
        v = load_pack<P>(inp + row, i);
    }
    bool aligned() const { return aligned16(inp); }
};

// One warp per row: out = (x - mean) * rstd * weight + bias, with mean and rstd (1 / standard
// deviation) saved for the backward. No __syncthreads: a warp whose row is past N just leaves.
template <class Act, int kVec, int kCached, class Rows>
__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(Act* out, float* mean, float* rstd, Rows x, const Act* weight, const Act* bias, int N,
                             int C) {
    using P = Pack<Act, kVec>;
    // What the exercise below uses ([[maybe_unused]]: while it is a stub, nothing does).
    [[maybe_unused]] const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kWarps + threadIdx.x / 32;
    if (n >= N) return;  // the whole warp: warp_sum below needs all 32 lanes
    [[maybe_unused]] const size_t row = size_t(n) * C;
    [[maybe_unused]] const int packs = C / kVec;  // packs of kVec elements (16 bytes when kVec > 1)
    // With kCached > 0 the lane's packs stay here from pass 1 to passes 2 and 3; without, each
    // pass reads the row again.
    [[maybe_unused]] P cache[kCached > 0 ? kCached : 1];

    // EXERCISE BEGIN stage00.layernorm_forward TESTS Kernels.LayerNormForward|Slots.ResidualLayerNormForward|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.CachedGenerationMatchesTheFullForward|Model.MasterWeightsStayFp32|Model.GradientAccumulation|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero|Model.PaddingChangesNothing
    // Pass 1: the row and its sum.
    float sum = 0.0f;
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        x.read(row, i, v);
        if constexpr (kCached > 0) cache[k] = v;
#pragma unroll
        for (int j = 0; j < kVec; ++j) sum += to_float(v.v[j]);
    });
    const float m = cuda::warp_sum(sum) / C;

    // Pass 2: the biased variance (divide by C, as torch.nn.LayerNorm) from squared deviations,
    // not E[x²] - m², which cancels badly when the mean is large against the spread.
    float sq = 0.0f;
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        if constexpr (kCached > 0) v = cache[k];
        else x.read_again(row, i, v);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
            const float d = to_float(v.v[j]) - m;
            sq += d * d;
        }
    });
    const float s = rsqrtf(cuda::warp_sum(sq) / C + kLayerNormEps);

    // Pass 3: normalise, scale and shift.
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        P v;
        if constexpr (kCached > 0) v = cache[k];
        else x.read_again(row, i, v);
        const P w = load_pack<P>(weight, i), b = load_pack<P>(bias, i);
        P o;
#pragma unroll
        for (int j = 0; j < kVec; ++j)
            o.v[j] = from_float<Act>((to_float(v.v[j]) - m) * s * to_float(w.v[j]) + to_float(b.v[j]));
        store_pack(out + row, i, o);
    });
    if (lane == 0) {
        mean[n] = m;
        rstd[n] = s;
    }
    // EXERCISE END
}

// 16-byte packs need every row on a 16-byte boundary: the base pointers aligned (aligned16,
// common/cuda/types.cuh) and C a multiple of the pack. Otherwise the kernel reads one element
// at a time, still a warp per row.
template <class Act, class Rows>
void launch_layernorm_forward(cudaStream_t stream, Act* out, float* mean, float* rstd, const Rows& x,
                              const Act* weight, const Act* bias, int N, int C) {
    if (N == 0) return;  // a grid of 0 blocks is a launch error
    constexpr int kVec = 16 / sizeof(Act);
    const bool packed = C % kVec == 0 && x.aligned() && aligned16(out) && aligned16(weight) && aligned16(bias);
    constexpr int kCached = kCachedPacks<Act>;
    const auto kernel = !packed                        ? layernorm_forward_kernel<Act, 1, 0, Rows>
                        : C <= 32 * kVec * kCached ? layernorm_forward_kernel<Act, kVec, kCached, Rows>
                                                     : layernorm_forward_kernel<Act, kVec, 0, Rows>;
    kernel<<<cuda::ceil_div(N, kWarps), kThreads, 0, stream>>>(out, mean, rstd, x, weight, bias, N, C);
    LAUNCH_CHECK();
}

// ---- backward -----------------------------------------------------------------------------------

// The row's two sums for the input gradient (pass 1 of the backward), from one pack of x, dout
// and weight: g = dout · weight, g_sum += g, gx_sum += g · xhat.
template <class Act, int kVec>
__device__ inline void add_row_sums(float& g_sum, float& gx_sum, const Pack<Act, kVec>& x, const Pack<Act, kVec>& d,
                                    const Pack<Act, kVec>& w, float m, float s) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const float xhat = (to_float(x.v[j]) - m) * s, g = to_float(d.v[j]) * to_float(w.v[j]);
        g_sum += g;
        gx_sum += g * xhat;
    }
}

// Pass 2 of the backward over one row: dinp += rstd · (g - mean_c(g) - xhat · mean_c(g · xhat)),
// pack by pack, with the lane's packs of x and dout from its cache (kCached, filled in pass 1 by
// for_each_pack<kUnrolled>) or read again, from L1/L2 (the warp has just read them).
template <int kUnrolled, bool kCached, class Act, int kVec, int kSlots>
__device__ inline void add_input_gradient(Act* dinp, const Act* inp, const Act* dout, const Act* weight, size_t row,
                                          int lane, int packs, const Pack<Act, kVec> (&x_cache)[kSlots],
                                          const Pack<Act, kVec> (&d_cache)[kSlots], float m, float s, float g_mean,
                                          float gx_mean) {
    static_assert(!kCached || (kUnrolled > 0 && kSlots >= kUnrolled), "a cached row is unrolled, one slot a pack");
    using P = Pack<Act, kVec>;
    for_each_pack<kUnrolled>(lane, packs, [&](int k, int i) {
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

// One warp per row: dinp[n,c] += rstd · (g - mean_c(g) - xhat · mean_c(g · xhat)), with
// g = dout · weight and xhat = (x - mean) · rstd. It adds (+=): the residual stream's gradient
// arrives through this branch and around it. mean and rstd come saved from the forward, so a
// row needs only its own warp: pass 1 sums, pass 2 writes.
template <class Act, int kVec, int kCached>
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_input_kernel(Act* dinp, const Act* dout, const Act* inp, const Act* weight, const float* mean,
                                    const float* rstd, int N, int C) {
    using P = Pack<Act, kVec>;
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kWarps + threadIdx.x / 32;
    if (n >= N) return;  // the whole warp
    const size_t row = size_t(n) * C;
    const int packs = C / kVec;
    const float m = mean[n], s = rstd[n];
    [[maybe_unused]] P x_cache[kCached > 0 ? kCached : 1], d_cache[kCached > 0 ? kCached : 1];

    float g_sum = 0.0f, gx_sum = 0.0f;
    for_each_pack<kCached>(lane, packs, [&](int k, int i) {
        const P x = load_pack<P>(inp + row, i), d = load_pack<P>(dout + row, i);
        if constexpr (kCached > 0) {
            x_cache[k] = x;
            d_cache[k] = d;
        }
        add_row_sums(g_sum, gx_sum, x, d, load_pack<P>(weight, i), m, s);
    });
    const float g_mean = cuda::warp_sum(g_sum) / C, gx_mean = cuda::warp_sum(gx_sum) / C;
    add_input_gradient<kCached, (kCached > 0)>(dinp, inp, dout, weight, row, lane, packs, x_cache, d_cache, m, s,
                                                g_mean, gx_mean);
}

// dweight[c] += sum_n dout · xhat, dbias[c] += sum_n dout: one thread per column over a chunk of
// rows (neighbouring threads, neighbouring columns: coalesced), partial sums added with
// atomicAdd (see column_sum in elementwise.cuh). Stage 04 sums them inside the input gradient's
// kernel instead, on its way through the rows.
template <class Act>
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const Act* dout, const Act* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int row0 = blockIdx.y * kRowsPerChunk, row1 = min(N, row0 + kRowsPerChunk);
    float dw = 0.0f, db = 0.0f;
    for (int n = row0; n < row1; ++n) {
        const float d = to_float(dout[size_t(n) * C + c]);
        dw += d * (to_float(inp[size_t(n) * C + c]) - mean[n]) * rstd[n];
        db += d;
    }
    atomicAdd(&dweight[c], dw);
    atomicAdd(&dbias[c], db);
}

struct LayerNorm {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                        const Act* weight, const Act* bias, int N, int C) {
        launch_layernorm_forward(ctx.stream, out, mean, rstd, InputRows<Act>{inp}, weight, bias, N, C);
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        if (N == 0) return;
        constexpr int kVec = 16 / sizeof(Act);
        const bool packed = C % kVec == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp) && aligned16(weight);
        constexpr int kCached = kCachedPacks<Act>;
        const auto kernel = !packed                        ? layernorm_backward_input_kernel<Act, 1, 0>
                            : C <= 32 * kVec * kCached ? layernorm_backward_input_kernel<Act, kVec, kCached>
                                                         : layernorm_backward_input_kernel<Act, kVec, 0>;
        kernel<<<cuda::ceil_div(N, kWarps), kThreads, 0, ctx.stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
        LAUNCH_CHECK();
        const dim3 grid(cuda::ceil_div(C, 256), cuda::ceil_div(N, kRowsPerChunk));
        layernorm_backward_params_kernel<<<grid, 256, 0, ctx.stream>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
