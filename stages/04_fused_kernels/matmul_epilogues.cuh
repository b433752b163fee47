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
// PyTorch equivalent: what torch.compile's Inductor does by choosing cuBLASLt's epilogue
// variants (addmm with bias, and GELU fused into its generated kernels).
#pragma once
#include "../00_fp32_baseline/elementwise.cuh"
#include "../00_fp32_baseline/matmul.cuh"
#include "cuda/backend.cuh"
#include "train/compose.h"

namespace gpt::stage04 {

using stage00::CublasMatmul;

struct EpilogueMatmul {
    static constexpr const char* source = __FILE__;

    // out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]  (bias may be null)
    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, const Act* weight, const Act* bias,
                        int N, int C, int OC) {
        if (bias) {
            cuda::Epilogue e;
            e.kind = cuda::Epilogue::kBias;
            e.bias = bias;
            if (CublasMatmul::product(ctx, out, inp, weight, N, C, OC, e)) return;
        }
        CublasMatmul::forward(ctx, out, inp, weight, bias, N, C, OC);
    }

    // dinp = dout · weight;  dweight += doutᵀ · inp;  dbias += column sums of dout
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, int N, int C, int OC) {
        CublasMatmul::input_gradient(ctx, dinp, dout, weight, N, C, OC);
        parameter_gradients(ctx, dweight, dbias, dout, inp, N, C, OC);
    }

    // dweight and dbias from one pass over dout. The epilogue writes the bias gradient of this
    // batch, while the gradients of a step add up over its micro-batches: it goes to scratch, and
    // a kernel of OC threads adds it (stage 00's add, out = a + b).
    template <class Act>
    static void parameter_gradients(CudaBackend::Context& ctx, float* dweight, float* dbias, const Act* dout,
                                    const Act* inp, int N, int C, int OC) {
        if (dbias) {
            float* partial = static_cast<float*>(ctx.gemm.scratch_for(sizeof(float) * OC, ctx.stream, "bias gradient"));
            cuda::Epilogue e;
            e.kind = cuda::Epilogue::kBGradB;
            e.bias_grad = partial;
            if (CublasMatmul::weight_gradient(ctx, dweight, dout, inp, N, C, OC, e)) {
                stage00::Residual::forward(ctx, dbias, dbias, partial, size_t(OC));
                return;
            }
        }
        CublasMatmul::weight_gradient(ctx, dweight, dout, inp, N, C, OC);
        if (dbias) stage00::column_sum(ctx, dbias, dout, N, OC);
    }
};

// The MLP's first layer: out = gelu(inp · weightᵀ + bias), pre = inp · weightᵀ + bias kept for
// the backward pass, in one cuBLASLt call.
struct MatmulBiasGelu {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, Act* pre, const Act* inp, const Act* weight,
                        const Act* bias, int N, int C, int OC) {
        cuda::Epilogue e;
        e.kind = cuda::Epilogue::kGeluAuxBias;
        e.bias = bias;
        e.aux = pre;
        e.aux_ld = OC;
        if (CublasMatmul::product(ctx, out, inp, weight, N, C, OC, e)) return;
        compose::MatmulThenGelu<EpilogueMatmul, stage00::Gelu>::forward(ctx, out, pre, inp, weight, bias, N, C, OC);
    }
};

// The MLP's second layer's backward, on through the GELU before it: dpre = (dout · W) ⊙
// gelu'(pre), the GELU's derivative applied as the product is written.
struct MatmulBackwardGelu {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dpre, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* pre, const Act* weight, int N, int C, int OC) {
        cuda::Epilogue e;
        e.kind = cuda::Epilogue::kDGelu;
        e.aux = const_cast<Act*>(pre);  // read, not written
        e.aux_ld = C;
        if (CublasMatmul::input_gradient(ctx, dpre, dout, weight, N, C, OC, e)) {
            EpilogueMatmul::parameter_gradients(ctx, dweight, dbias, dout, inp, N, C, OC);
            return;
        }
        compose::MatmulBackwardThenGelu<EpilogueMatmul, stage00::Gelu>::backward(ctx, dpre, dweight, dbias, dout, inp,
                                                                                 pre, weight, N, C, OC);
    }
};

}  // namespace gpt::stage04
