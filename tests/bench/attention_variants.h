// The benchmark-only variants of an attention op: a std::tuple of ops, each with a `label`. None,
// unless a header specialises this for the op, as tests/bench/attention_variants.cuh does for
// stage 03's and tests/bench/first_versions.cuh for stage 00's (stages 00-02). bench_stageNN times
// them (--attention-variants yes) and test_stageNN checks them against the CPU
// (Kernels.AttentionBenchmarkVariants).
#pragma once
#include <tuple>

namespace gpt::bench {

template <class Attention>
struct AttentionVariants {
    using type = std::tuple<>;
};

}  // namespace gpt::bench
