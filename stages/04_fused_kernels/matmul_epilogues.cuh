// Stage 04: the linear layers finish their work inside the matmul. Stage 00 wrote x · Wᵀ to
// memory and read it back to add the bias, wrote the MLP's pre-activation and read it back for
// the GELU; its backward read dout once more for the bias gradient and read and wrote the MLP's
// hidden gradient once more for the GELU's derivative. cuBLASLt's epilogues (cuda/gemm.cuh) do
// each of these on the matmul's result while it is still in registers:
//
//   forward   qkv, attn_proj, fc_proj   BIAS            x · Wᵀ + b
//             fc                        GELU_AUX_BIAS   gelu(x · Wᵀ + b), keeping x · Wᵀ + b for backward
//   backward  every dweight product     BGRADB          dbias summed while dout is read for dweight
//             fc_proj's dinp            DGELU           (dout · W) ⊙ gelu'(pre): the GELU's backward
//
// Bytes each one saves at GPT-2 124M, B x T = 16 x 1024, bf16 (N = 16384 rows): the bias of a
// 3C-wide layer is a read and a write of N x 3C (2 x 72 MiB); the fc's GELU, a read and a write of
// N x 4C (2 x 96 MiB) forward and again backward. Where cuBLASLt has no algorithm for an epilogue
// (small or odd widths, unaligned vectors), the same work runs as in stage 00: separate kernels.
// And where cuBLASLt has one but it is slower than the plain product and the separate kernel
// together (an epilogue can force a slower kernel), those run instead: the first call of each op
// at each shape times both ways and keeps the faster (GemmContext::faster_of, cuda/gemm.cuh).
// PyTorch equivalent: what torch.compile's Inductor does by choosing cuBLASLt's epilogue
// variants (addmm with bias, and GELU fused into its generated kernels).
#pragma once
#include "../00_fp32_baseline/elementwise.cuh"
#include "../00_fp32_baseline/matmul.cuh"
#include "cuda/backend.cuh"
#include "train/compose.h"

namespace gpt::stage04 {

using stage00::CublasMatmul;

// Runs `fused` (the product with its epilogue) or `separate` (the plain product and a kernel),
// whichever was faster the first time this op met this shape; `fused` returns false where
// cuBLASLt has no such epilogue, and `separate` then runs. `repeatable`: running either way
// several times leaves the result of one run, so the first call may time them.
template <class Fused, class Separate>
void run_faster(CudaBackend::Context& ctx, const char* op, int N, int C, int OC, bool repeatable, Fused&& fused,
                Separate&& separate) {
    const std::string what = std::string(op) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                             " OC=" + std::to_string(OC);
    if (ctx.gemm.faster_of(ctx.stream, what, repeatable, fused, separate) == 0 && fused()) return;
    separate();
}

struct EpilogueMatmul {
    static constexpr const char* source = __FILE__;
    static constexpr bool kWeightGradientsFollowBeta = true;  // CublasMatmul::weight_gradient

    // out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]  (bias may be null)
    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, const Act* weight, const Act* bias,
                        int N, int C, int OC) {
        if (!bias) {
            CublasMatmul::product(ctx, out, inp, weight, N, C, OC);
            return;
        }
        run_faster(
            ctx, "matmul+bias", N, C, OC, true,
            [&] { return CublasMatmul::product(ctx, out, inp, weight, N, C, OC, cuda::Epilogue::add_bias(bias)); },
            [&] {
                CublasMatmul::forward(ctx, out, inp, weight, bias, N, C, OC);  // the product, then a bias kernel
                return true;
            });
    }

    // dinp = dout · weight;  dweight += doutᵀ · inp (= in a step's first backward);  dbias += column
    // sums of dout
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, int N, int C, int OC) {
        CublasMatmul::input_gradient(ctx, dinp, dout, weight, N, C, OC);
        parameter_gradients(ctx, dweight, dbias, dout, inp, N, C, OC);
    }

    // dweight and dbias. The epilogue sums the bias gradient while the weight gradient reads
    // dout; the other way is a column sum after the product. Either writes this batch's bias
    // gradient to scratch (the epilogue writes, it cannot add), and stage 00's add (out = a + b)
    // adds it to the step's. The two ways can be timed only while the weight
    // gradient is written, not added to (a step's first backward, common/cuda/backend.cuh).
    template <class Act>
    static void parameter_gradients(CudaBackend::Context& ctx, float* dweight, float* dbias, const Act* dout,
                                    const Act* inp, int N, int C, int OC) {
        if (!dbias) {
            CublasMatmul::weight_gradient(ctx, dweight, dout, inp, N, C, OC);
            return;
        }
        float* partial = static_cast<float*>(ctx.gemm.scratch_for(sizeof(float) * OC, ctx.stream, "bias gradient"));
        run_faster(
            ctx, "weight gradient+bias gradient", N, C, OC, ctx.weight_gradient_beta == 0.0f,
            [&] {
                return CublasMatmul::weight_gradient(ctx, dweight, dout, inp, N, C, OC,
                                                     cuda::Epilogue::bias_gradient(partial));
            },
            [&] {
                CublasMatmul::weight_gradient(ctx, dweight, dout, inp, N, C, OC);
                CudaBackend::fill_zero(ctx, partial, size_t(OC));
                stage00::column_sum(ctx, partial, dout, N, OC);
                return true;
            });
        stage00::Residual::forward(ctx, dbias, dbias, partial, size_t(OC));
    }
};

// The MLP's first layer: out = gelu(inp · weightᵀ + bias), pre = inp · weightᵀ + bias kept for
// the backward pass, in one cuBLASLt call (or, where faster, stage 00's way: EpilogueMatmul's
// product and bias, then the GELU).
struct MatmulBiasGelu {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, Act* pre, const Act* inp, const Act* weight,
                        const Act* bias, int N, int C, int OC) {
        run_faster(
            ctx, "matmul+bias+GELU", N, C, OC, true,
            [&] {
                return CublasMatmul::product(ctx, out, inp, weight, N, C, OC,
                                             cuda::Epilogue::bias_then_gelu(bias, pre, OC));
            },
            [&] {
                compose::MatmulThenGelu<EpilogueMatmul, stage00::Gelu>::forward(ctx, out, pre, inp, weight, bias, N,
                                                                                C, OC);
                return true;
            });
    }
};

// The MLP's second layer's backward, on through the GELU before it: dpre = (dout · W) ⊙
// gelu'(pre), the GELU's derivative applied as the product is written (or, where faster, by
// stage 00's GELU backward after it), then the parameter gradients.
struct MatmulBackwardGelu {
    static constexpr const char* source = __FILE__;
    static constexpr bool kWeightGradientsFollowBeta = true;  // EpilogueMatmul::parameter_gradients

    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dpre, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* pre, const Act* weight, int N, int C, int OC) {
        run_faster(
            ctx, "input gradient+GELU backward", N, C, OC, true,
            [&] {
                return CublasMatmul::input_gradient(ctx, dpre, dout, weight, N, C, OC,
                                                    cuda::Epilogue::times_gelu_derivative(pre, C));
            },
            [&] {
                CublasMatmul::input_gradient(ctx, dpre, dout, weight, N, C, OC);  // dpre: d(gelu(pre)) for now
                stage00::Gelu::backward(ctx, dpre, pre, dpre, size_t(N) * C);
                return true;
            });
        EpilogueMatmul::parameter_gradients(ctx, dweight, dbias, dout, inp, N, C, OC);
    }
};

}  // namespace gpt::stage04
