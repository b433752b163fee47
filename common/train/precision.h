// The arithmetic a stage's matmuls use: the one precision knob of a stage policy. The matmul
// library's compute type follows from it (MatmulMath, common/cuda/gemm.cuh) and so do the test
// tolerances (common/testing/tolerance.h), so the two cannot disagree.
#pragma once

namespace gpt {

enum class Precision {
    FP32,  // fp32 operands and arithmetic
    TF32,  // fp32 storage, operands rounded to TF32 (10 mantissa bits) inside the matmuls
    BF16,  // bf16 storage of activations and matmul operands, fp32 accumulation
};

inline const char* precision_name(Precision p) {
    switch (p) {
        case Precision::FP32: return "FP32";
        case Precision::TF32: return "TF32";
        case Precision::BF16: return "BF16";
    }
    return "unknown";
}

// The name of an activation type, for the banner (common/cuda/types.cuh adds bf16).
template <class T>
const char* act_type_name();
template <>
inline const char* act_type_name<float>() { return "float"; }

}  // namespace gpt
