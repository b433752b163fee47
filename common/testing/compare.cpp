#include "testing/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

#include "util/error.h"

namespace gpt::test {

uint64_t test_seed() {
    static const uint64_t seed = [] {
        if (const char* s = std::getenv("GPT_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
        return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    }();
    return seed;
}

std::vector<float> random_normal(Rng& rng, size_t n, float scale, float offset) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        // the scale drifts between 0.5x and 1.5x along the array
        const float s = scale * (0.5f + static_cast<float>(i % 97) / 97.0f);
        v[i] = offset + s * static_cast<float>(rng.normal());
    }
    return v;
}

std::vector<float> random_uniform(Rng& rng, size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = rng.uniform(lo, hi);
    return v;
}

std::vector<int> random_tokens(Rng& rng, size_t n, int vocab) {
    std::vector<int> v(n);
    for (auto& t : v) {
        // u^3 piles the ids towards 0 like Zipf's law, and still reaches the last ids
        const double u = rng.uniform();
        t = std::min(vocab - 1, static_cast<int>(u * u * u * vocab));
    }
    return v;
}

Comparison compare(const float* a, const float* e, size_t n, Tolerance tol, const float* term_size) {
    Comparison c;
    c.n = n;
    double sum_e2 = 0.0, sum_d2 = 0.0;
    for (size_t i = 0; i < n; ++i) sum_e2 += double(e[i]) * e[i];
    c.rms = n ? std::sqrt(sum_e2 / n) : 0.0;
    for (size_t i = 0; i < n; ++i) {
        if (is_poison(a[i])) ++c.unwritten;
        if (!std::isfinite(a[i]) || !std::isfinite(e[i])) ++c.nan;
        const double err = std::fabs(double(a[i]) - double(e[i]));
        sum_d2 += err * err;
        // written so that a NaN error counts as bad
        const double size = term_size ? std::max(c.rms, double(term_size[i])) : c.rms;
        if (!(err <= tol.rtol * std::fabs(double(e[i])) + tol.atol * size)) ++c.bad;
        if (!std::isnan(c.worst_err) && !(err <= c.worst_err)) {  // the first NaN stays the worst
            c.worst_err = err;
            c.worst = i;
        }
    }
    c.rel_l2 = sum_e2 > 0 ? std::sqrt(sum_d2 / sum_e2) : std::sqrt(sum_d2);
    return c;
}

namespace {
std::string header(const std::string& what) {
    return what + " (test seed " + std::to_string(test_seed()) + ", rerun with GPT_TEST_SEED=" +
           std::to_string(test_seed()) + "): ";
}
}  // namespace

::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& actual,
                                     const std::vector<float>& expected, Tolerance tol) {
    return all_close(what, actual, expected, tol, {});
}

::testing::AssertionResult all_close(const std::string& what, const std::vector<float>& actual,
                                     const std::vector<float>& expected, Tolerance tol,
                                     const std::vector<float>& term_size) {
    if (actual.size() != expected.size() || (!term_size.empty() && term_size.size() != expected.size()))
        return ::testing::AssertionFailure() << header(what) << "size " << actual.size() << " != expected "
                                             << expected.size() << " (term sizes: " << term_size.size() << ")";
    const Comparison c = compare(actual.data(), expected.data(), actual.size(), tol,
                                 term_size.empty() ? nullptr : term_size.data());
    const double l2_limit = rel_l2_limit(tol, c.n);
    const bool l2_ok = c.rel_l2 <= l2_limit;  // false for NaN
    if (c.bad == 0 && c.nan == 0 && c.unwritten == 0 && l2_ok) return ::testing::AssertionSuccess();
    std::ostringstream s;
    s << header(what) << c.bad << " of " << c.n << " elements outside " << tol.name << " tolerance (rtol "
      << tol.rtol << ", atol " << tol.atol << " x rms " << c.rms
      << (term_size.empty() ? "" : " or the element's term size, the larger") << "); relative L2 error " << c.rel_l2
      << (l2_ok ? " within" : " above") << " its limit " << l2_limit;
    if (c.unwritten) s << "; " << c.unwritten << " never written (still poisoned)";
    if (c.nan) s << "; " << c.nan << " NaN or infinite";
    if (c.n) s << "; worst at [" << c.worst << "]: " << actual[c.worst] << " vs " << expected[c.worst];
    return ::testing::AssertionFailure() << s.str();
}

::testing::AssertionResult rel_l2_close(const std::string& what, const std::vector<float>& actual,
                                        const std::vector<float>& expected, double max_rel_l2) {
    if (actual.size() != expected.size())
        return ::testing::AssertionFailure() << header(what) << "size " << actual.size() << " != expected "
                                             << expected.size();
    const Comparison c = compare(actual.data(), expected.data(), actual.size(), Tolerance{0, 0, max_rel_l2, "l2"});
    if (c.nan == 0 && c.unwritten == 0 && c.rel_l2 <= max_rel_l2) return ::testing::AssertionSuccess();
    std::ostringstream s;
    s << header(what) << "relative L2 error " << c.rel_l2 << " (limit " << max_rel_l2 << ")";
    if (c.nan) s << "; " << c.nan << " NaN or infinite";
    if (c.unwritten) s << "; " << c.unwritten << " never written";
    if (c.n) s << "; worst at [" << c.worst << "]: " << actual[c.worst] << " vs " << expected[c.worst];
    return ::testing::AssertionFailure() << s.str();
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
        return message;
    }
    ADD_FAILURE() << "no gpt::Error thrown";
    return "";
}

}  // namespace gpt::test
