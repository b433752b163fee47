// The fixed case every trainer is checked on against the PyTorch reference: the `micro` model
// from a seeded initialisation, overfitting one batch of B x T tokens for 20 steps. The inputs
// are made here, deterministically, so that tests can rebuild them without files; the tool
// make_reference_inputs writes them out for the PyTorch side.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt::test {

struct ReferenceCase {
    GPTConfig config;
    std::vector<float> params;  // file layout
    std::vector<int> tokens;    // B*T + 1: inputs are tokens[0, B*T), targets tokens[1, B*T]
    int B = 0, T = 0;
};

ReferenceCase overfit_case();

// The settings the reference run used, read from its JSON output, so that a test trains with
// exactly what produced the curve it compares against.
struct ReferenceSettings {
    int batch = 0, seq = 0, steps = 0, warmup = 0;
    float lr = 0, min_lr_frac = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
};
ReferenceSettings load_reference_settings(const std::string& json_path);

// A fresh, empty folder of the running GoogleTest test, $GPT_TEST_OUT/GROUP/Suite.Name (under
// the system's temporary folder without GPT_TEST_OUT): CTest runs tests in parallel processes.
std::string scratch_dir(const std::string& group);

// Where the live PyTorch outputs of the CTest fixture land, and the committed curves.
std::string reference_output_dir();   // $GPT_TEST_OUT/reference
// REQUIRE_TORCH=1 (CI): a missing output of the PyTorch side is a failure, not a reason to skip.
bool torch_required();
std::string committed_curve_path();   // $GPT_SOURCE_DIR/tests/reference/curves/micro_overfit.json

// The full-size curve: GPT-2 124M (`d12`) from gpt_init's seed-1337 initialisation, trained on the
// default corpus (tests/reference/README.md, "d12_brown_fp32.json"), made on a GPU.
constexpr const char* kFullSizeModel = "d12";
constexpr unsigned long long kFullSizeSeed = 1337;
std::string committed_full_size_curve_path();  // $GPT_SOURCE_DIR/tests/reference/curves/d12_brown_fp32.json
std::string default_corpus_dir();              // $GPT_DATA_DIR/brown
// A folder CTest names in the environment (GPT_DATA_DIR, GPT_SOURCE_DIR, GPT_TEST_OUT): its value,
// or "" and a test failure that says to run the test through ctest.
std::string ctest_dir(const char* variable);

}  // namespace gpt::test
