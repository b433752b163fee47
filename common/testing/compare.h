// NaN-safe comparisons for tests, with messages that say where and by how much.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "testing/tolerance.h"
#include "util/rng.h"

namespace gpt::test {

// --- poisoning: fill outputs with a marker before a launch, then check every element changed

// A quiet NaN with a recognisable payload: an element that still holds it was never written.
constexpr uint32_t kPoisonBits = 0x7FC0DEADu;
// The same idea for bf16 outputs (GPU tests): a quiet bf16 NaN with its own payload. Converting
// bf16 to float shifts its 16 bits up, so after download it reads as kPoisonBf16FloatBits.
// A computed NaN does not look like it: conversions to bf16 give the canonical NaN 0x7FFF.
constexpr uint16_t kPoisonBf16Bits = 0x7FDEu;
constexpr uint32_t kPoisonBf16FloatBits = uint32_t(kPoisonBf16Bits) << 16;
inline float poison_value() {
    float f;
    std::memcpy(&f, &kPoisonBits, sizeof(f));
    return f;
}
inline bool is_poison(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits == kPoisonBits || bits == kPoisonBf16FloatBits;
}
inline void poison(std::vector<float>& v) { v.assign(v.size(), poison_value()); }

// --- random inputs: fresh every run, reproducible with GPT_TEST_SEED=<n> ------------------

// The seed of this test process (printed in every failure message).
uint64_t test_seed();
// Normal values with a scale that changes along the array (never all-equal, never all-zero),
// plus an offset so that the mean is not zero.
std::vector<float> random_normal(Rng& rng, size_t n, float scale = 1.0f, float offset = 0.0f);
std::vector<float> random_uniform(Rng& rng, size_t n, float lo, float hi);
std::vector<int> random_tokens(Rng& rng, size_t n, int vocab);  // skewed towards small ids, as real text

// --- comparisons ---------------------------------------------------------------------------

struct Comparison {
    size_t n = 0, bad = 0, nan = 0, unwritten = 0;
    size_t worst = 0;        // index of the largest error
    double worst_err = 0.0;  // |a - e| there
    double rms = 0.0;        // of expected
    double rel_l2 = 0.0;     // ||a - e|| / ||e|| (NaN if either holds a NaN)
};
// Counts the elements outside tol's element-wise bound (`bad`); rel_l2 is measured, not judged.
// `term_size`, where given, is for each element the size of the terms it was summed from
// (testing/term_sizes.h; testing/tolerance.h, "Sums whose terms are larger than they are"): that
// element's `atol` is then in units of the larger of the tensor's rms and its own term size.
Comparison compare(const float* actual, const float* expected, size_t n, Tolerance tol,
                   const float* term_size = nullptr);

// The tolerance's two checks: every element within rtol and atol, and the relative L2 error of
// the whole tensor within rel_l2_limit(tol, n) (testing/tolerance.h says why both). Fails on any NaN or
// infinity, on an element that still holds the poison value, and on a size mismatch. The
// message gives the count of elements outside, the worst one and the relative L2 error.
::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& actual,
                                     const std::vector<float>& expected, Tolerance tol);
// The same with each element's `atol` in units of max(rms, term_size[i]) (see compare above).
::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& actual,
                                     const std::vector<float>& expected, Tolerance tol,
                                     const std::vector<float>& term_size);
// Whole-tensor check: ||a - e|| / ||e|| <= max_rel_l2, NaN-safe.
::testing::AssertionResult rel_l2_close(const std::string& what, const std::vector<float>& actual,
                                        const std::vector<float>& expected, double max_rel_l2);

// The message of the gpt::Error that f throws, checked to be one line; "" and a test failure
// when it throws none.
std::string error_of(const std::function<void()>& f);

}  // namespace gpt::test
