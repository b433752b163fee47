// Stage 03 — flash attention: causal self-attention as one fused kernel per pass, tiles of q, k
// and v in shared memory, the softmax computed online, nothing of size T x T in memory. Stage 02
// wrote the attention probabilities (B x NH x T x T, bf16) and read them back three times; here
// each block keeps one running maximum and sum per row, and the backward pass recomputes the
// probabilities from one saved number per row (flash_attention.cuh). Everything else is stage 02.
// PyTorch equivalent: F.scaled_dot_product_attention(q, k, v, is_causal=True)
#pragma once
#include "../02_bf16_autocast/stage.cuh"
#include "basic_flash_forward.cuh"  // the forward without tensor cores: for the tests and the benchmark only
#include "flash_attention.cuh"

namespace gpt {

struct Stage03 : Stage02 {
    static constexpr const char* name = "03_flash_attention";
    static constexpr const char* description = "stage 02 with fused causal attention (online softmax, no T x T matrix)";

    using Attention = stage03::FlashAttention;  // the one thing this stage changes
};

}  // namespace gpt
