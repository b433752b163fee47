// Stage 01 — TF32: the fp32 matmuls run on tensor cores in TensorFloat-32 (operands rounded to
// 10 mantissa bits, products summed in fp32). Nothing else changes: activations, storage, every
// other kernel and the optimizer stay fp32.
// PyTorch equivalent: torch.set_float32_matmul_precision('high')
#pragma once
#include "../00_fp32_baseline/stage.cuh"
#include "tf32.cuh"

namespace gpt {

struct Stage01 : Stage00 {
    static constexpr const char* name = "01_tf32";
    static constexpr const char* description = "stage 00 with the matmuls on TF32 tensor cores";

    // The one thing this stage changes. The matmul arithmetic follows (tf32.cuh), and so do the
    // test tolerances and the GPUs it runs on: TF32 tensor cores start with Ampere.
    static constexpr Precision kPrecision = Precision::TF32;
    static constexpr int kMinComputeCapability = 80;
    static constexpr const char* kGpuReason = "TF32 tensor cores";
};

}  // namespace gpt
