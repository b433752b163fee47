// The arithmetic a stage's matmuls use: the one precision knob of a stage policy. The matmul
// library's compute type follows from it (MatmulMath, common/cuda/gemm.cuh) and so do the test
// tolerances (common/testing/tolerance.h), so the two cannot disagree.
#pragma once
#include <type_traits>

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

// Whether T is bf16 (common/cuda/types.cuh says so of its bf16).
template <class T>
inline constexpr bool is_bf16_v = false;

// Whether a stage's activations (act_t, the matmuls' operands) are stored as its precision's
// matmuls read them: float for FP32 and TF32 (TF32 rounds inside the matmul only), bf16 for
// BF16. Checked at compile time for every stage (Ops<S>, train/policy.h).
template <class Act>
constexpr bool activations_fit(Precision p) {
    return p == Precision::BF16 ? is_bf16_v<Act> : std::is_same_v<Act, float>;
}

// The name of an activation type, for the banner (common/cuda/types.cuh adds bf16).
template <class T>
const char* act_type_name();
template <>
inline const char* act_type_name<float>() { return "float"; }

}  // namespace gpt
