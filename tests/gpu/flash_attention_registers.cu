// Built, never run: every kernel of stage 03's attention (those of the stage's template, which the
// trainer and the benchmark's 16-rows, atomic-dq and 128-row-block variants use, and the forward
// without tensor cores; not the benchmark's copy of the kernels as they were before), compiled with ptxas
// reporting each one's registers (-v) and a spill or any other use of local memory made an error
// (-warn-spills -warn-lmem-usage -Werror).
// The kernels keep their tiles in registers; one that spills reads and writes local memory in its
// inner loop, the kind of slowdown that no test catches. tests/gpu/checks.cmake builds it with
// stage 03 for sm_80 and sm_90, the architectures the kernels are written for, whatever the build's
// own: the build log shows the registers of each kernel on both, and a spill on either stops it.
#include "../../stages/03_flash_attention/basic_flash_forward.cuh"
#include "../../stages/03_flash_attention/flash_attention.cuh"

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
    instantiate<stage03::FlashAttention>(ctx);  // the trainer's: 32 rows per warp, blocks of 64 keys and 64 queries
    instantiate<stage03::FlashAttentionWith<16>>(ctx);
    instantiate<stage03::FlashAttentionWith<32, stage03::kTile, stage03::kTile, true>>(ctx);  // atomic dq
    instantiate<stage03::FlashAttentionWith<32, 2 * stage03::kTile, 2 * stage03::kTile>>(ctx);  // 128 keys, 128 queries
    instantiate<stage03::BasicFlashForward>(ctx);  // the forward without tensor cores (its backward is the stage's)
}

}  // namespace gpt
