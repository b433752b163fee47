// The arithmetic a stage's matmuls use. Tests pick their tolerances from it
// (common/testing/tolerance.h).
#pragma once

namespace gpt {

enum class Precision {
    FP32,  // fp32 operands and arithmetic
    TF32,  // fp32 storage, operands rounded to TF32 (10 mantissa bits) inside the matmuls
    BF16,  // bf16 storage of activations and matmul operands, fp32 accumulation
};

}  // namespace gpt
