// Stage 01: the compute type that lets cuBLAS use TF32 tensor cores for fp32 matrices.
// CUBLAS_COMPUTE_32F means "fp32 arithmetic"; CUBLAS_COMPUTE_32F_FAST_TF32 allows the library
// to round the operands to TF32 (8-bit exponent like fp32, 10-bit mantissa like fp16) and use
// tensor cores, accumulating in fp32. Inputs and outputs stay fp32 in memory.
#pragma once
#include <cublas_v2.h>

namespace gpt::stage01 {

// EXERCISE BEGIN stage01.tf32_compute_type TESTS Matmul.UsesTheStagesMath
constexpr cublasComputeType_t kTf32Compute = CUBLAS_COMPUTE_32F_FAST_TF32;
// EXERCISE STUB constexpr cublasComputeType_t kTf32Compute = CUBLAS_COMPUTE_32F;  // TODO: the TF32 compute type
// EXERCISE END

}  // namespace gpt::stage01
