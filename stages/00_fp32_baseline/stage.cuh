// Stage 00 — the fp32 baseline: what a careful newcomer writes first. Every op is its own
// kernel with one thread per element or per row (one block per row for the classifier, whose
// rows are 50257 long), all arithmetic is fp32, the matmuls run on cuBLAS without tensor cores,
// and attention materialises the T x T scores.
// PyTorch equivalent: the model in eager mode, fp32 (torch.backends.cuda.matmul.allow_tf32 = False).
#pragma once
#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "cuda/backend.cuh"
#include "elementwise.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "train/precision.h"

namespace gpt {

struct Stage00 : CudaBackend {
    static constexpr const char* name = "00_fp32_baseline";
    static constexpr const char* description = "fp32 everywhere, one kernel per op, cuBLAS without tensor cores";

    using act_t = float;  // activations and matmul operands
    static constexpr Precision kPrecision = Precision::FP32;
    static constexpr cublasComputeType_t kMatmulCompute = CUBLAS_COMPUTE_32F;  // fp32 math, no TF32

    using Embedding = stage00::Embedding;
    using LayerNorm = stage00::LayerNorm;
    using Matmul = stage00::CublasMatmul<kMatmulCompute>;
    using Attention = stage00::MaterializedAttention<kMatmulCompute>;
    using Gelu = stage00::Gelu;
    using Residual = stage00::Residual;
    using Classifier = stage00::SoftmaxCrossEntropy;
    using Optimizer = stage00::AdamW;
};

}  // namespace gpt
