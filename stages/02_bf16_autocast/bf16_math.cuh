// Stage 02: the arithmetic of bf16 matmuls: bf16 operands on the tensor cores, products summed
// in fp32. The compute type is FP32's, CUBLAS_COMPUTE_32F: TF32 is a mode for fp32 operands only,
// and it is the element types (bf16 here) that select the bf16 tensor-core kernels.
#pragma once
#include "../00_fp32_baseline/matmul.cuh"

namespace gpt::cuda {

template <>
struct MatmulMath<Precision::BF16> : MatmulMath<Precision::FP32> {
    static constexpr const char* source = __FILE__;
};

}  // namespace gpt::cuda
