// Stage 01: the arithmetic of TF32 matmuls. CUBLAS_COMPUTE_32F means "fp32 arithmetic";
// CUBLAS_COMPUTE_32F_FAST_TF32 allows the library to round the operands to TF32 (8-bit exponent
// like fp32, 10-bit mantissa like fp16) and use tensor cores, accumulating in fp32. Inputs and
// outputs stay fp32 in memory. Every matmul of a stage whose precision is TF32 runs with it:
// stage 00's Matmul and Attention take it from the context (common/cuda/backend.cuh).
// The same arithmetic written by hand, to see what the library does: tf32_wmma_matmul.cuh.
#pragma once
#include <cublas_v2.h>

#include "cuda/gemm.cuh"
#include "tf32_wmma_matmul.cuh"

namespace gpt::cuda {

template <>
struct MatmulMath<Precision::TF32> {
    // EXERCISE BEGIN stage01.tf32_compute_type TESTS Matmul.UsesTheStagesMath
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    // EXERCISE STUB static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // TODO: the TF32 compute type
    // EXERCISE END
    static constexpr const char* source = __FILE__;
    // A kernel of this arithmetic written by hand on the tensor cores: the tests check it and the
    // kernel benchmark times it (tests/bench/matmul_variants.h); the trainer keeps cuBLASLt.
    using HandWritten = ::gpt::stage01::Tf32WmmaMatmul;
};

}  // namespace gpt::cuda
