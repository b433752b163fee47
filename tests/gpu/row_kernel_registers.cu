// Built, never run: the LayerNorm kernels (stage 00's forward, with its own rows and with stage
// 04's residual rows, its input gradient, and stage 04's fused backward; every variant their
// launches choose between, in bf16 and fp32), stage 00's causal softmax and classifier, its
// element-wise kernels in 16-byte packs (GELU, residual, embedding, bias, heads), stage 04's
// fused classifier and its benchmark candidates that hold a row in registers
// (tests/bench/classifier_variants.cuh), and stage 04's fused AdamW, compiled with ptxas reporting each one's registers (-v) and a spill or any
// other use of local memory made an error, as tests/gpu/flash_attention_registers.cu does for
// stage 03's attention. Both LayerNorm passes keep a lane's share of its row in registers; the
// fused backward is written to fit two blocks an SM (128 registers a thread,
// __launch_bounds__(kThreads, 2)); past that ptxas must spill, and this build says so instead of
// a slower kernel. tests/gpu/checks.cmake builds it for sm_80 and sm_90.
#include "../../stages/00_fp32_baseline/attention.cuh"
#include "../../stages/00_fp32_baseline/classifier.cuh"
#include "../../stages/00_fp32_baseline/matmul.cuh"
#include "../../stages/04_fused_kernels/classifier.cuh"
#include "../../stages/04_fused_kernels/fused_adamw.cuh"
#include "../../stages/04_fused_kernels/residual_layernorm.cuh"
#include "../../stages/05_vocab_padding/padded_columns.cuh"
#include "../bench/classifier_variants.cuh"

namespace gpt {

// Instantiates every kernel the launches below may pick, without running any.
template <class Act>
void instantiate_row_kernels(cudaStream_t stream) {
    Act* x = nullptr;
    float* f = nullptr;
    stage00::launch_layernorm_forward(stream, x, f, f, stage00::InputRows<Act>{x}, x, x, 0, 8);
    stage00::launch_layernorm_forward(stream, x, f, f, stage04::ResidualRows<Act>{x, x, x}, x, x, 0, 8);
    constexpr int kVec = 16 / sizeof(Act);
    (void)&stage00::layernorm_backward_input_kernel<Act, 1, 0>;
    (void)&stage00::layernorm_backward_input_kernel<Act, kVec, stage00::kCachedPacks<Act>>;
    (void)&stage00::layernorm_backward_input_kernel<Act, kVec, 0>;
    stage04::launch_layernorm_backward(stream, x, f, f, x, x, x, f, f, 0, 8);
    (void)&stage00::causal_softmax_forward_kernel<Act>;
    (void)&stage00::causal_softmax_backward_kernel<Act>;
    (void)&stage00::softmax_crossentropy_forward_kernel<Act>;
    (void)&stage00::softmax_crossentropy_backward_kernel<Act>;
    (void)&stage00::elementwise_kernel<kVec, Act, stage00::GeluOf>;
    (void)&stage00::elementwise_kernel<kVec, Act, stage00::GeluGradient>;
    (void)&stage00::elementwise_kernel<kVec, Act, stage00::Add>;
    (void)&stage00::embedding_forward_kernel<kVec, Act>;
    (void)&stage00::add_bias_kernel<kVec, Act>;
    (void)&stage00::copy_heads_kernel<true, kVec, Act>;
    (void)&stage00::copy_heads_kernel<false, kVec, Act>;
    (void)&stage04::fused_classifier_kernel<Act, true, true, stage05::MaskPaddedColumns>;
    (void)&stage04::fused_adamw_kernel<Act>;
}

void instantiate_every_row_kernel(cudaStream_t stream) {
    instantiate_row_kernels<bf16>(stream);
    instantiate_row_kernels<float>(stream);
    // bf16 only: the benchmark's candidates for the fused classifier.
    (void)&bench::classifier_variants::classifier_in_registers_kernel<1024, 7, stage05::MaskPaddedColumns>;
    (void)&bench::classifier_variants::classifier_in_registers_kernel<512, 13, stage05::MaskPaddedColumns>;
    (void)&bench::classifier_variants::classifier_in_registers_kernel<1024, 7, stage04::EveryColumnIsAToken>;
    (void)&bench::classifier_variants::classifier_in_registers_kernel<512, 13, stage04::EveryColumnIsAToken>;
}

}  // namespace gpt
