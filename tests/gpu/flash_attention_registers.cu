// Built, never run: every kernel of stage 03's attention, compiled with ptxas reporting each one's
// registers (-v) and a spill to local memory made an error (-warn-spills -Werror). The kernels
// keep their tiles in registers; one that spills reads and writes local memory in its inner loop,
// the kind of slowdown that no test catches. tests/gpu/checks.cmake builds it with stage 03 for
// the stage's architectures, so the build log shows the registers of each kernel for sm_80 and
// sm_90, and a spill on either stops the build.
#include "../../stages/03_flash_attention/flash_attention.cuh"
#include "bench/attention_variants.cuh"  // after the stage's kernels, as it expects

namespace gpt {

// Instantiates the op's launches (forward and backward, each head size) without running them.
template <class Attention>
void instantiate(CudaBackend::Context& ctx) {
    bf16* x = nullptr;
    float* f = nullptr;
    Attention::forward(ctx, x, f, x, 1, 1, 64, 1, f);
    Attention::backward(ctx, x, x, x, x, f, 1, 1, 64, 1, f);
}

void instantiate_every_attention_kernel(CudaBackend::Context& ctx) {
    instantiate<stage03::FlashAttention>(ctx);  // the trainer's
    instantiate<bench::FlashAttention16Rows>(ctx);
    instantiate<bench::FlashAttentionDeterministicDq>(ctx);
}

}  // namespace gpt
