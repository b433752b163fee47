// Stage 05: which columns of a row of logits are tokens, once the vocabulary is padded. The LM
// head has Vp = 50304 rows instead of V = 50257, so each row of logits has 47 columns that belong
// to no token. They must not reach the softmax (they would take probability from the real
// tokens) and their gradient must be exactly 0, so that the padded rows of wte, which start at
// zero, stay zero through every step: the model trains exactly as the unpadded one.
// PyTorch equivalent: none in nanoGPT, whose padded logits do enter the softmax (their tokens
// never occur, so training pushes them down); llm.c masks them the same way as here.
#pragma once

namespace gpt::stage05 {

// What stage 04's fused classifier asks about a row of Vp columns, V of them tokens.
struct MaskPaddedColumns {
    static constexpr const char* source = __FILE__;
    static constexpr bool kMasksPadding = true;
    // EXERCISE BEGIN stage05.mask_padded_columns TESTS Kernels.ClassifierForward|Kernels.ClassifierBackward|Slots.ClassifierWithGrad|Slots.ClassifierWithGradBenchmarkVariants|Model.PaddedRowsStayZero
    // The columns the softmax sums over: the tokens, [0, V).
    __device__ static int softmax_columns(int V, int) { return V; }
    // Whether column v is a token; the others get a gradient of exactly 0.
    __device__ static bool is_token(int v, int V) { return v < V; }
    // EXERCISE STUB __device__ static int softmax_columns(int, int Vp) { return Vp; }
    // EXERCISE STUB __device__ static bool is_token(int, int) { return true; }
    // EXERCISE END
};

}  // namespace gpt::stage05
