// Loss curves: reading the PyTorch reference's output and comparing step by step.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpt::test {

struct ReferenceRun {
    std::vector<double> losses;
    std::vector<double> grad_norms;
    std::string source;  // file it came from, for messages
};

// Reads the JSON written by tests/reference/gpt2_reference.py --out.
ReferenceRun load_reference_run(const std::string& path);

// Passes when every step's |actual - expected| <= rel · |expected|; NaN anywhere fails.
::testing::AssertionResult curves_close(const std::string& what, const std::vector<double>& actual,
                                        const std::vector<double>& expected, double rel);

// Raw little-endian float32 file (step-0 gradients written by the reference).
std::vector<float> read_floats(const std::string& path);

}  // namespace gpt::test
