// Stage 03's algorithm alone: the flash-attention forward in plain fp32 arithmetic, no tensor cores.
//
// The same pass as flash_forward_kernel (flash_attention.cuh), written to be read first: key and
// value tiles in shared memory, the online softmax, nothing of size T x T, and the same results
// (out, and the log-sum-exp of every row that the stage's backward reads). One thread owns one
// query row: its q, its 32 scores of the tile, its running maximum m and sum l, and its output
// row o all live in that thread's registers, so each line of the pseudocode in
// docs/03_flash_attention.md ("FlashAttention-2 in pseudocode") is a line or a loop here.
//
// What it leaves out, each of which flash_attention.cuh adds:
// - tensor cores: q·k and p·v are loops of fp32 fused multiply-adds in each thread;
// - bf16 operands: q, k and v are converted to fp32 as they are loaded;
// - ldmatrix and cp.async: a tile is loaded with plain loads, then a barrier, and nothing loads
//   while a tile is computed on (no second buffer);
// - 32 rows per warp and the quad: a row is one thread's, so its maximum and sum need no shuffle;
// - the mask only on the diagonal tiles and the scale in the exponent: the mask is tested on every
//   score, q is scaled by 1/sqrt(HS) once, and the exponential is expf.
// One row per thread rather than one warp per row: a warp's 32 threads then read the same k or v
// element at the same time (one shared-memory read, broadcast to all), and no thread needs
// another's result. A warp per row would split every q·k over 32 lanes and add it up with 5
// shuffles per score.
//
// Why it is slower, a prediction: an H100 or H200 SM does 128 fp32 FMAs, 256 FLOPs, per clock,
// against 4,096 bf16 FLOPs on its tensor cores: 16 times fewer (the SXM data sheets: 67 against
// 989 TFLOP/s, dense). At B = 16, T = 1024, 12 heads of 64 the forward is 25.8
// GFLOP per layer (causal half), so this kernel takes at least 25.8 / 67 = 0.39 ms. Every 4 FMAs
// also need one 16-byte shared-memory read of k or v (the compiler merges four neighbouring
// reads): 5 instructions, and an SM issues 4 a clock, which its FMAs alone would fill: 0.39 × 5/4
// = 0.48 ms. The stage's tensor-core forward was predicted about 3 times as fast as this one, not
// 16, because it spends much of its time on the softmax; the GPU runs measured about 12 times
// (docs/03_flash_attention.md, "The algorithm alone", says why the prediction missed).
//
// Not used by the trainer: BasicFlashForward below is one of the benchmark's variants
// (tests/bench/attention_variants.cuh) and is tested by Kernels.AttentionForwardWithoutTensorCores.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "cuda/exercise.cuh"
#include "cuda/types.cuh"
#include "flash_attention.cuh"

namespace gpt::stage03 {

constexpr int kBasicRows = 64;  // queries per block, one per thread
constexpr int kBasicKeys = 32;  // keys per tile

// One block: 64 queries of one (batch, head), blockIdx.y, against the key tiles up to its last
// query. lse[bh·T + t] is the natural log of sum_k exp(q·k / sqrt(HS)), as flash_forward_kernel
// writes it.
template <int HS>
__global__ void __launch_bounds__(kBasicRows) basic_flash_forward_kernel(bf16* out, float* lse, const bf16* qkv, int T,
                                                                         int NH) {
    __shared__ __align__(16) float k_s[kBasicKeys][HS];
    __shared__ __align__(16) float v_s[kBasicKeys][HS];

    // Reversed, as in flash_forward_kernel: the lowest blockIdx.x takes the longest row of tiles.
    const int query0 = (gridDim.x - 1 - blockIdx.x) * kBasicRows;
    const int query = query0 + threadIdx.x;  // this thread's row; one at or past T only helps load
    const Head<HS> head(qkv, T, NH);

    // The query, times 1/sqrt(HS) once, so that q·k is the score itself.
    const float scale = 1.0f / sqrtf(float(HS));
    float q[HS], o[HS];
#pragma unroll
    for (int d = 0; d < HS; ++d) {
        q[d] = query < T ? to_float(head.q[size_t(query) * head.stride + d]) * scale : 0.0f;
        o[d] = 0.0f;  // sum of exp(score - m) · v over the keys so far
    }
    float m = -INFINITY;  // the largest score so far
    float l = 0.0f;       // sum of exp(score - m) over the keys so far

    const int last = min(query0 + kBasicRows, T) - 1;  // the block's last query: later keys are all masked
    for (int key0 = 0; key0 <= last; key0 += kBasicKeys) {
        __syncthreads();  // everyone is done with the tile before
        for (int i = threadIdx.x; i < kBasicKeys * HS; i += kBasicRows) {
            const int j = i / HS, d = i % HS, key = key0 + j;
            const size_t at = size_t(key) * head.stride + d;
            k_s[j][d] = key < T ? to_float(head.k[at]) : 0.0f;  // keys past T: zeros, masked below
            v_s[j][d] = key < T ? to_float(head.v[at]) : 0.0f;
        }
        __syncthreads();
        if (key0 > query) continue;  // every key of this tile comes after the query

        // The tile's scores. Keys after the query are -inf: the causal mask. Key key0 is at or
        // before the query, so at least one score is finite.
        float s[kBasicKeys];
#pragma unroll
        for (int j = 0; j < kBasicKeys; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < HS; ++d) dot = fmaf(q[d], k_s[j][d], dot);
            s[j] = key0 + j <= query ? dot : -INFINITY;
        }

        // The online softmax (docs/03_flash_attention.md, "The online softmax"): the new maximum,
        // the sums so far rescaled to it, then the tile's probabilities p and p·v added.
        // EXERCISE BEGIN stage03.basic_flash_forward TESTS Kernels.AttentionForwardWithoutTensorCores
        float new_max = m;
#pragma unroll
        for (int j = 0; j < kBasicKeys; ++j) new_max = fmaxf(new_max, s[j]);
        const float rescale = expf(m - new_max);  // 1 if the maximum stayed; 0 on the first tile (m = -inf)
        l *= rescale;
#pragma unroll
        for (int d = 0; d < HS; ++d) o[d] *= rescale;
#pragma unroll
        for (int j = 0; j < kBasicKeys; ++j) {
            const float p = expf(s[j] - new_max);  // 0 where masked
            l += p;
#pragma unroll
            for (int d = 0; d < HS; ++d) o[d] = fmaf(p, v_s[j][d], o[d]);
        }
        m = new_max;
        // EXERCISE END
    }

    if (query >= T) return;
    const float inv_l = 1.0f / l;  // the division by l, once, at the end
    bf16* dst = out + head.out_offset + size_t(query) * head.C;
#pragma unroll
    for (int d = 0; d < HS; ++d) dst[d] = from_float<bf16>(o[d] * inv_l);
    lse[head.stats_offset + query] = m + logf(l);
}

// The op: this forward, and the stage's own backward, which recomputes the probabilities from the
// log-sum-exp this forward saves. Head sizes, memory and checks are the stage's.
struct BasicFlashForward : FlashAttention {
    static constexpr const char* label = "no tensor cores (forward)";
    static constexpr const char* source = __FILE__;
    static constexpr bool kTensorCoreForward = false;  // Kernels.AttentionForwardWithoutTensorCores looks for it

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, void* saved, const Act* qkv, int B, int T, int C, int NH,
                        void* /*scratch*/) {
        static_assert(std::is_same_v<Act, bf16>, "the stage's backward, which this op keeps, runs on bf16");
        check_grid(B, NH);
        with_head_size(C, NH, [&](auto hs) {
            constexpr int HS = decltype(hs)::value;
            const dim3 grid(cuda::ceil_div(T, kBasicRows), B * NH);
            basic_flash_forward_kernel<HS>
                <<<grid, kBasicRows, 0, ctx.stream>>>(out, static_cast<float*>(saved), qkv, T, NH);
            LAUNCH_CHECK();
        });
    }
};

}  // namespace gpt::stage03
