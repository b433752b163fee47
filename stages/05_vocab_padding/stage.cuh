// Stage 05 — the vocabulary padded from 50257 to 50304 (a multiple of 128). The LM head is the
// largest matmul of GPT-2 124M, and 50257 is odd (29 x 1733): its rows of logits start at every possible
// alignment and its tiles never come out even, so the tensor cores and the memory system work
// on ragged edges. With 47 more rows of wte, always zero, every dimension of that matmul is a
// multiple of 128 and every row of logits starts on a 256-byte boundary:
//   kVocabMultiple = 128     wte, its gradient and its optimizer state get Vp = 50304 rows in
//                            memory (files keep 50257: common/model/params.h)
//   padded_columns.cuh       the classifier leaves the 47 padded columns out of the softmax and
//                            gives them a gradient of 0, so the padded rows stay zero
// Everything else is stage 04's.
// PyTorch equivalent: GPTConfig(vocab_size=50304)
#pragma once
#include "../04_fused_kernels/stage.cuh"
#include "padded_columns.cuh"

namespace gpt {

struct Stage05 : Stage04 {
    static constexpr const char* name = "05_vocab_padding";
    static constexpr const char* description =
        "stage 04 with the vocabulary padded to a multiple of 128 (50257 -> 50304), padded logits masked";

    static constexpr int kVocabMultiple = 128;

    using Classifier = stage04::FusedClassifierOver<stage05::MaskPaddedColumns>;
    using ClassifierWithGrad = Classifier;
};

}  // namespace gpt
