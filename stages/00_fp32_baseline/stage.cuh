// Stage 00 — the fp32 baseline: eager PyTorch in fp32, op for op. Every op is its own kernel,
// written the way eager PyTorch writes its kernel for it (a warp or a block per row for the row ops,
// LayerNorm, the softmaxes and the classifier; a 16-byte pack a thread for the element-wise ops), all arithmetic
// is fp32, the matmuls run on cuBLAS without tensor cores, and attention materialises the T x T
// scores. What later stages change is what eager PyTorch leaves on the table: the precision, the
// T x T matrix, the round trips between ops, the launches, the vocabulary's alignment.
// PyTorch equivalent: the model in eager mode, fp32 (torch.backends.cuda.matmul.allow_tf32 = False).
#pragma once
#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "cuda/backend.cuh"
#include "elementwise.cuh"
#include "layernorm.cuh"
#include "matmul.cuh"
#include "train/parallel.h"
#include "train/policy.h"

namespace gpt {

struct Stage00 : CudaBackend {
    static constexpr const char* name = "00_fp32_baseline";
    static constexpr const char* description = "fp32 everywhere, one kernel per op, cuBLAS without tensor cores";

    using act_t = float;                                      // activations and matmul operands
    static constexpr Precision kPrecision = Precision::FP32;  // matmul arithmetic and test tolerances
    static constexpr int kVocabMultiple = 1;                  // rows of wte: V rounded up to this
    static constexpr bool kCaptureStep = false;               // the training step as one CUDA Graph
    static constexpr int kLossChunkRows = 0;                  // the loss over all rows' logits at once
    static constexpr bool kTimeMatmuls = false;               // cuBLASLt's first choice of algorithm

    // The GPUs it runs on: any CUDA 13 builds for, compute capability 7.5 (T4, RTX 20xx) and newer.
    static constexpr int kMinComputeCapability = 75;
    static constexpr const char* kGpuReason = "fp32 CUDA cores only";

    // Whether a training step gives the same bits every time it runs on the same weights, moments
    // and batch: nullptr if it does, else why not (the GPU tests that need the same bits skip the
    // stage with this reason). Not here: threads add into one sum with atomicAdd in whatever order
    // the GPU runs them, and floating-point sums round differently in another order.
    static constexpr const char* kNotBitwiseRepeatable =
        "the gradients of wte, of the biases and of the LayerNorms are sums of atomicAdds "
        "(stages/00_fp32_baseline/elementwise.cuh, layernorm.cuh)";

    // One kernel (or library call) each.
    using Embedding = stage00::Embedding;
    using LayerNorm = stage00::LayerNorm;
    using Matmul = stage00::CublasMatmul;
    using Attention = stage00::MaterializedAttention;
    using Gelu = stage00::Gelu;
    using Residual = stage00::Residual;
    using Classifier = stage00::SoftmaxCrossEntropy;

    // Fusion slots: nothing is fused yet, so the graph runs the ops above one after another
    // (common/train/compose.h). Stage 04 fills them.
    using MatmulBiasGelu = Unfused;      // matmul + bias + GELU
    using MatmulBackwardGelu = Unfused;  // a matmul's backward + the GELU's before it
    using ResidualLayerNorm = Unfused;   // residual add + LayerNorm
    using ClassifierWithGrad = Unfused;  // softmax, loss and the logits' gradient

    using Optimizer = stage00::AdamW;  // owns the weights and the moments; norm, clip, AdamW
    using Parallel = SingleProcess;    // one process (stage 06: NCCL data parallel)
};

}  // namespace gpt
