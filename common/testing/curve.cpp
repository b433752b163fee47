#include "testing/curve.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace gpt::test {

ReferenceRun load_reference_run(const std::string& path) {
    const Json j = Json::parse_file(path);
    ReferenceRun r;
    r.losses = j["losses"].numbers();
    if (j.has("grad_norms")) r.grad_norms = j["grad_norms"].numbers();
    r.source = path;
    return r;
}

::testing::AssertionResult curves_close(const std::string& what, const std::vector<double>& actual,
                                        const std::vector<double>& expected, double rel) {
    if (actual.size() != expected.size())
        return ::testing::AssertionFailure() << what << ": " << actual.size() << " steps, expected "
                                             << expected.size();
    std::ostringstream bad;
    int n_bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < actual.size(); ++i) {
        const double err = std::fabs(actual[i] - expected[i]);
        const double r = err / std::fabs(expected[i]);
        if (!(err <= rel * std::fabs(expected[i]))) {  // NaN fails
            if (n_bad++ < 5) bad << "\n  step " << i << ": " << actual[i] << " vs " << expected[i] << " (rel " << r << ")";
        }
        if (!(r <= worst)) worst = r;
    }
    if (n_bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << n_bad << " of " << actual.size()
                                         << " steps differ by more than " << rel << " relative (worst " << worst
                                         << "):" << bad.str();
}

std::vector<float> read_floats(const std::string& path) {
    const std::string bytes = read_regular_file(path, "float array");
    if (bytes.size() % sizeof(float)) throw Error(path + ": size is not a multiple of 4 bytes");
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

}  // namespace gpt::test
