// The test helpers must fail when they should: a comparison that cannot fail proves nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/tolerance.h"

using namespace gpt::test;

namespace {
std::vector<float> sample_data() {
    gpt::Rng rng(test_seed());
    return random_normal(rng, 1000, 2.0f, 0.5f);
}
}  // namespace

TEST(Compare, EqualTensorsPass) {
    const auto e = sample_data();
    EXPECT_TRUE(all_close("same", e, e, kFp32));
    EXPECT_TRUE(rel_l2_close("same", e, e, 1e-6));
}

TEST(Compare, SmallErrorWithinTolerancePasses) {
    const auto e = sample_data();
    auto a = e;
    for (auto& x : a) x *= 1.0f + 1e-6f;
    EXPECT_TRUE(all_close("tiny error", a, e, kFp32));
}

TEST(Compare, OneWrongValueFails) {
    const auto e = sample_data();
    auto a = e;
    a[617] += 0.01f;
    const auto r = all_close("wrong value", a, e, kFp32);
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("[617]"), std::string::npos) << r.message();
    EXPECT_FALSE(rel_l2_close("wrong value", a, e, 1e-6));
}

TEST(Compare, NaNInActualFails) {
    const auto e = sample_data();
    auto a = e;
    a[3] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(all_close("nan", a, e, kBf16));
    EXPECT_FALSE(rel_l2_close("nan", a, e, 1.0));
}

TEST(Compare, NaNInExpectedFails) {
    auto e = sample_data();
    const auto a = e;
    e[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(all_close("nan expected", a, e, kBf16));
}

TEST(Compare, AllNaNFails) {
    const std::vector<float> a(100, std::nanf("")), e(100, std::nanf(""));
    EXPECT_FALSE(all_close("all nan", a, e, kBf16));
    EXPECT_FALSE(rel_l2_close("all nan", a, e, 1.0));
}

TEST(Compare, InfinityFails) {
    const auto e = sample_data();
    auto a = e;
    a[0] = std::numeric_limits<float>::infinity();
    EXPECT_FALSE(all_close("inf", a, e, kBf16));
}

TEST(Compare, UnwrittenElementFails) {
    const auto e = sample_data();
    auto a = e;
    a[999] = poison_value();
    const auto r = all_close("unwritten", a, e, kBf16);
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("never written"), std::string::npos) << r.message();
}

TEST(Compare, PoisonIsRecognisedAndIsNaN) {
    std::vector<float> v(10, 1.0f);
    poison(v);
    for (float x : v) {
        EXPECT_TRUE(is_poison(x));
        EXPECT_TRUE(std::isnan(x));
    }
    EXPECT_FALSE(is_poison(std::nanf("")));
}

TEST(Compare, SizeMismatchFails) {
    const auto e = sample_data();
    auto a = e;
    a.pop_back();
    EXPECT_FALSE(all_close("size", a, e, kFp32));
    EXPECT_FALSE(rel_l2_close("size", a, e, 1.0));
}

TEST(Compare, TolerancesGrowWithLowerPrecision) {
    EXPECT_LT(kFp32.rtol, kTf32.rtol);
    EXPECT_LT(kTf32.rtol, kBf16.rtol);
    EXPECT_LT(model_rel_l2(Precision::FP32), model_rel_l2(Precision::TF32));
    // a bf16-sized error fails the fp32 and tf32 tolerances
    const auto e = sample_data();
    auto a = e;
    for (auto& x : a) x *= 1.0f + 1.0f / 128.0f;
    EXPECT_FALSE(all_close("bf16 error", a, e, kFp32));
    EXPECT_FALSE(all_close("bf16 error", a, e, kTf32));
}

TEST(RandomInputs, AreNotUniformAndNotZero) {
    gpt::Rng rng(test_seed());
    const auto v = random_normal(rng, 513);
    double mean = 0.0;
    for (float x : v) mean += x;
    mean /= v.size();
    double var = 0.0;
    for (float x : v) var += (x - mean) * (x - mean);
    EXPECT_GT(var / v.size(), 0.1);
    const auto t = random_tokens(rng, 10000, 50257);
    int small = 0, large = 0;
    for (int x : t) {
        ASSERT_GE(x, 0);
        ASSERT_LT(x, 50257);
        small += x < 5000;
        large += x > 45000;
    }
    EXPECT_GT(small, large);  // skewed like real text
    EXPECT_GT(large, 0);      // but the top of the vocabulary is reached
}

TEST(Curves, MatchingCurvesPass) {
    const std::vector<double> e = {10.9, 9.5, 8.1, 7.0};
    EXPECT_TRUE(curves_close("curve", e, e, 1e-4));
}

TEST(Curves, OneStepOffFails) {
    const std::vector<double> e = {10.9, 9.5, 8.1, 7.0};
    auto a = e;
    a[2] = 8.2;
    const auto r = curves_close("curve", a, e, 1e-3);
    EXPECT_FALSE(r);
    EXPECT_NE(std::string(r.message()).find("step 2"), std::string::npos) << r.message();
}

TEST(Curves, NaNFailsAndLengthMismatchFails) {
    const std::vector<double> e = {10.9, 9.5};
    EXPECT_FALSE(curves_close("nan", {10.9, std::nan("")}, e, 1.0));
    EXPECT_FALSE(curves_close("length", {10.9}, e, 1.0));
}
