// Stage 04 — fused kernels and CUDA Graphs: what torch.compile does, by hand. Stage 03 ran about
// twenty kernels per layer, most of them reading a whole activation from memory to do one or two
// operations on it and writing it back; the host queued each one. Here work that touches the same
// data is done in one pass over it, and the whole step is queued once:
//   matmul_epilogues.cuh    bias, GELU and their gradients finished inside the cuBLASLt matmuls
//   residual_layernorm.cuh  each residual add with the LayerNorm after it (stage 00's kernel,
//                           fed the sum as it is made), and LayerNorm's three gradients in one
//                           kernel
//   classifier.cuh          softmax, loss and the logits' gradient in one pass over each row,
//                           written over the logits: no N x V probability buffer
//   fused_adamw.cuh         AdamW over all parameters in one launch
//   kCaptureStep            the training step recorded once as a CUDA Graph and replayed
//   kLossChunkRows          the LM head and the classifier 8192 rows at a time: the logits of
//                           all B·T positions (1.6 GB at 16 x 1024) never exist at once
//   kTimeMatmuls            each matmul shape's algorithm: the fastest of cuBLASLt's candidates,
//                           timed on its first call (common/cuda/gemm.cuh), not the heuristic's
//                           first choice
// Attention is stage 03's, the optimizer's arithmetic stage 02's.
// PyTorch equivalent: model = torch.compile(model) (mode="reduce-overhead" for the graph,
// mode="max-autotune" for the timed matmuls)
#pragma once
#include "../03_flash_attention/stage.cuh"
#include "classifier.cuh"
#include "fused_adamw.cuh"
#include "matmul_epilogues.cuh"
#include "residual_layernorm.cuh"

namespace gpt {

struct Stage04 : Stage03 {
    static constexpr const char* name = "04_fused_kernels";
    static constexpr const char* description =
        "stage 03 with fused kernels (matmul epilogues, residual + LayerNorm, classifier, AdamW), the step as a CUDA "
        "Graph, the loss in chunks of rows, matmul algorithms chosen by timing";

    static constexpr bool kCaptureStep = true;     // one launch per step
    static constexpr int kLossChunkRows = 8192;   // logits of 8192 rows at a time (common/train/model_graph.h)
    static constexpr bool kTimeMatmuls = true;     // the fastest algorithm of each matmul shape, timed
    static constexpr const char* kNotBitwiseRepeatable =  // stage 00's reasons, with this stage's kernels
        "the gradients of wte, of the LayerNorms and (where cuBLASLt's epilogue does not sum them) of the biases are "
        "sums of atomicAdds (stages/00_fp32_baseline/elementwise.cuh, stages/04_fused_kernels/residual_layernorm.cuh), "
        "and each model times its matmuls' algorithms anew and may choose others (kTimeMatmuls, common/cuda/gemm.cuh)";

    using Matmul = stage04::EpilogueMatmul;  // bias in the matmul, bias gradient beside dweight
    using LayerNorm = stage04::LayerNorm;    // the first block's ln_1: the backward fused as the others'
    using Classifier = stage04::FusedClassifier;

    // The fusion slots, filled.
    using MatmulBiasGelu = stage04::MatmulBiasGelu;
    using MatmulBackwardGelu = stage04::MatmulBackwardGelu;
    using ResidualLayerNorm = stage04::ResidualLayerNorm;
    using ClassifierWithGrad = stage04::FusedClassifier;

    using Optimizer = stage04::FusedAdamW<act_t>;
};

}  // namespace gpt
