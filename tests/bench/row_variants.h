// The benchmark-only variants of the row ops, LayerNorm and the classifier, and of GELU: a
// std::tuple of ops, each with a `label`. None, unless a header specialises these for the op, as
// tests/bench/first_versions.cuh does for stage 00's (their first versions: one thread per row,
// one element per thread) and tests/bench/classifier_variants.cuh for stage 04's fused classifier
// (the ClassifierWithGrad slot). bench_stageNN times them (--variants yes) and test_stageNN checks
// them against the CPU (Kernels.LayerNormBenchmarkVariants, Kernels.ClassifierBenchmarkVariants,
// Kernels.GeluBenchmarkVariants, Slots.ClassifierWithGradBenchmarkVariants).
#pragma once
#include <tuple>

namespace gpt::bench {

template <class LayerNorm>
struct LayerNormVariants {
    using type = std::tuple<>;
};

template <class Classifier>
struct ClassifierVariants {
    using type = std::tuple<>;
};

template <class Gelu>
struct GeluVariants {
    using type = std::tuple<>;
};

template <class ClassifierWithGrad>
struct ClassifierWithGradVariants {
    using type = std::tuple<>;
};

}  // namespace gpt::bench
