// The one tolerance table. A value passes when |actual - expected| <= rtol·|expected| + atol·rms,
// where rms is the root mean square of the expected tensor (so atol scales with the data and
// near-zero elements, where relative error means nothing, are judged against the tensor's size).
//
// The numbers come from the unit roundoff u of each format (2^-24 fp32, 2^-11 tf32 operands,
// 2^-8 bf16 storage): a dot product of K rounded terms with random signs is off by about
// sqrt(K)·u·|terms| ≈ u·rms(result), so `atol` is a small multiple of u, and `rtol` allows a few
// roundings of the result itself. They are never loosened to make a failure pass: a change here
// carries its reason in this comment.
#pragma once

namespace gpt::test {

struct Tolerance {
    double rtol;
    double atol;  // in units of the expected tensor's RMS
    const char* name;
};

enum class Precision { FP32, TF32, BF16 };

// Element-wise kernel outputs (forward and backward).
//  fp32: different summation orders than the CPU, u = 6e-8, K up to 50257 → 1e-5·rms, 1e-4 rel
//  tf32: operands rounded to 10 mantissa bits, 2^-11 = 4.9e-4; 8 units as margin for reductions
//        over K = 3072 → 4e-3
//  bf16: stored with 7 mantissa bits, 2^-8 = 3.9e-3; inputs, outputs and intermediates are each
//        rounded once → 8 units = 3.1e-2
constexpr Tolerance kKernelFp32 = {1e-4, 1e-5, "fp32"};
constexpr Tolerance kKernelTf32 = {4e-3, 4e-3, "tf32"};
constexpr Tolerance kKernelBf16 = {3.2e-2, 3.2e-2, "bf16"};

constexpr Tolerance kernel_tolerance(Precision p) {
    return p == Precision::FP32 ? kKernelFp32 : p == Precision::TF32 ? kKernelTf32 : kKernelBf16;
}

// Whole-tensor relative L2 error, ||actual - expected|| / ||expected||: model gradients and
// loss curves, where errors of many ops add up.
//  CPU reference vs PyTorch (both fp32): 1e-4, the bound the project promises.
//  fp32 GPU: 1e-4 as well. tf32: 1e-2 (20 steps of compounding 2^-11 errors through 2 layers and
//  an optimizer amplifying small gradients). bf16: 2e-2 per loss (2^-8 rounding of activations).
constexpr double kModelRelL2Fp32 = 1e-4;
constexpr double kModelRelL2Tf32 = 1e-2;
constexpr double kModelRelL2Bf16 = 2e-2;

constexpr double model_rel_l2(Precision p) {
    return p == Precision::FP32 ? kModelRelL2Fp32 : p == Precision::TF32 ? kModelRelL2Tf32 : kModelRelL2Bf16;
}

}  // namespace gpt::test
