// Stage 02 — bf16 mixed precision, "autocast" written out by hand. Activations, the matmuls'
// operands and outputs and the activations saved for backward are bf16 (half the bytes, and
// the bf16 tensor-core rate); everything where precision matters stays fp32:
//   fp32  master weights, AdamW moments, parameter gradients, gradient norm
//   fp32  LayerNorm mean/rstd, softmax max/sum, the classifier's probabilities and the loss
//         (computed in float inside the same kernels as stage 00, which are templates on the
//         activation type; the attention probabilities are stored in bf16, as autocast does)
//   fp32  accumulation inside every matmul
// The kernels of stages 00-01 are reused as they are, instantiated in bf16; the one new kernel
// is the optimizer's, which refreshes the bf16 copy of the weights (mixed_adamw.cuh).
// PyTorch equivalent: with torch.autocast(device_type="cuda", dtype=torch.bfloat16): ...
#pragma once
#include "../01_tf32/stage.cuh"
#include "mixed_adamw.cuh"

namespace gpt {

struct Stage02 : Stage01 {
    static constexpr const char* name = "02_bf16_autocast";
    static constexpr const char* description = "bf16 activations and matmuls, fp32 master weights, statistics and loss";

    using act_t = bf16;
    static constexpr Precision kPrecision = Precision::BF16;
    // bf16 operands, fp32 accumulation (TF32 is a mode for fp32 operands only)
    static constexpr cublasComputeType_t kMatmulCompute = CUBLAS_COMPUTE_32F;
    using Matmul = stage00::CublasMatmul<kMatmulCompute>;
    using Attention = stage00::MaterializedAttention<kMatmulCompute>;
    using Optimizer = stage02::MixedPrecisionAdamW;
};

}  // namespace gpt
