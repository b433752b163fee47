// The benchmark-only variant of a precision's matmul: a kernel written by hand that does the
// arithmetic the precision names (MatmulMath, common/cuda/gemm.cuh), which the trainer never uses.
// A precision has one when its MatmulMath says `using HandWritten = ...;`, as TF32's does
// (stages/01_tf32/tf32.cuh: the WMMA kernel of stages/01_tf32/tf32_wmma_matmul.cuh); the others
// have none (void). bench_stageNN times it beside the stage's Matmul (--matmul-variants yes) and
// test_stageNN checks it against the CPU (Kernels.MatmulOnTf32TensorCores).
#pragma once
#include <type_traits>

namespace gpt::bench {

template <class Math, class = void>
struct HandWrittenMatmul {
    using type = void;
};
template <class Math>
struct HandWrittenMatmul<Math, std::void_t<typename Math::HandWritten>> {
    using type = typename Math::HandWritten;
};

}  // namespace gpt::bench
