// Stage 02 — bf16 mixed precision, "autocast" written out by hand. Activations, the matmuls'
// operands and outputs and the activations saved for backward are bf16 (half the bytes, and
// the bf16 tensor-core rate); everything where precision matters stays fp32:
//   fp32  master weights, AdamW moments, parameter gradients, gradient norm
//   fp32  LayerNorm mean/rstd, softmax max/sum, the classifier's probabilities and the loss
//         (computed in float inside the same kernels as stage 00, which are templates on the
//         activation type; the attention probabilities are stored in bf16: autocast computes
//         the softmax in fp32 too, and its output is rounded to bf16 by the matmul that reads it)
//   fp32  accumulation inside every matmul
// The kernels of stages 00-01 are reused as they are, instantiated in bf16. New here: the
// arithmetic of bf16 matmuls (bf16_math.cuh) and the optimizer that keeps the bf16 copy of the
// weights (mixed_adamw.cuh).
// PyTorch equivalent: with torch.autocast(device_type="cuda", dtype=torch.bfloat16): ...
#pragma once
#include "../01_tf32/stage.cuh"
#include "bf16_math.cuh"
#include "mixed_adamw.cuh"

namespace gpt {

struct Stage02 : Stage01 {
    static constexpr const char* name = "02_bf16_autocast";
    static constexpr const char* description = "bf16 activations and matmuls, fp32 master weights, statistics and loss";

    using act_t = bf16;
    static constexpr Precision kPrecision = Precision::BF16;
    static constexpr const char* kGpuReason = "bf16 tensor cores";  // Ampere too: the same GPUs as stage 01
    using Optimizer = stage02::MixedPrecisionAdamW<act_t>;  // owns the bf16 copy of the weights
};

}  // namespace gpt
