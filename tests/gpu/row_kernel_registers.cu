// Built, never run: stage 04's row kernels (the residual + LayerNorm forward and backward, every
// variant their launches choose between, in bf16 and fp32) and its fused AdamW, compiled with
// ptxas reporting each one's registers (-v) and a spill or any other use of local memory made an
// error, as tests/gpu/flash_attention_registers.cu does for stage 03's attention. The LayerNorm
// backward keeps a lane's share of its row in registers and is written to fit two blocks an SM
// (128 registers a thread, __launch_bounds__(kThreads, 2)); past that ptxas must spill, and this
// build says so instead of a slower kernel. tests/gpu/checks.cmake builds it for sm_80 and sm_90.
#include "../../stages/04_fused_kernels/fused_adamw.cuh"
#include "../../stages/04_fused_kernels/residual_layernorm.cuh"

namespace gpt {

// Instantiates every kernel the launches below may pick, without running any.
template <class Act>
void instantiate_row_kernels(cudaStream_t stream) {
    Act* x = nullptr;
    float* f = nullptr;
    stage04::launch_layernorm_forward<true>(stream, x, x, f, f, x, x, x, x, 0, 8);
    stage04::launch_layernorm_forward<false>(stream, x, x, f, f, x, x, x, x, 0, 8);
    stage04::launch_layernorm_backward(stream, x, f, f, x, x, x, f, f, 0, 8);
    (void)&stage04::fused_adamw_kernel<Act>;
}

void instantiate_every_row_kernel(cudaStream_t stream) {
    instantiate_row_kernels<bf16>(stream);
    instantiate_row_kernels<float>(stream);
}

}  // namespace gpt
