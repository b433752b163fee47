#include "testing/reference_case.h"

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "model/params.h"
#include "testing/compare.h"
#include "util/error.h"
#include "util/json.h"
#include "util/rng.h"

namespace fs = std::filesystem;

namespace gpt::test {

ReferenceCase overfit_case() {
    ReferenceCase c;
    c.config = config_by_name("micro");
    c.B = 4;
    c.T = 32;
    c.params = init_parameters(c.config, 20261122);
    Rng rng(7);
    c.tokens = random_tokens(rng, size_t(c.B) * c.T + 1, c.config.vocab_size);
    return c;
}

ReferenceSettings load_reference_settings(const std::string& path) {
    const Json s = Json::parse_file(path)["settings"];
    ReferenceSettings r;
    r.batch = static_cast<int>(s["batch"].number);
    r.seq = static_cast<int>(s["seq"].number);
    r.steps = static_cast<int>(s["steps"].number);
    r.warmup = static_cast<int>(s["warmup"].number);
    r.lr = static_cast<float>(s["lr"].number);
    r.min_lr_frac = static_cast<float>(s["min_lr_frac"].number);
    r.weight_decay = static_cast<float>(s["weight_decay"].number);
    r.beta1 = static_cast<float>(s["beta1"].number);
    r.beta2 = static_cast<float>(s["beta2"].number);
    r.eps = static_cast<float>(s["eps"].number);
    r.grad_clip = static_cast<float>(s["grad_clip"].number);
    return r;
}

namespace {
std::string env_or(const char* name, const std::string& fallback) {
    const char* v = std::getenv(name);
    return v ? v : fallback;
}
}  // namespace

std::string scratch_dir(const std::string& group) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    const fs::path dir = fs::path(env_or("GPT_TEST_OUT", fs::temp_directory_path().string())) / group /
                         (std::string(test->test_suite_name()) + "." + test->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir.string();
}

std::string reference_output_dir() { return env_or("GPT_TEST_OUT", ".") + "/reference"; }

bool torch_required() { return env_or("REQUIRE_TORCH", "") == "1"; }

std::string committed_curve_path() {
    return env_or("GPT_SOURCE_DIR", GPT_SOURCE_DIR) + "/tests/reference/curves/micro_overfit.json";
}

std::string committed_full_size_curve_path() {
    return env_or("GPT_SOURCE_DIR", GPT_SOURCE_DIR) + "/tests/reference/curves/d12_brown_fp32.json";
}

std::string default_corpus_dir() { return env_or("GPT_DATA_DIR", GPT_DATA_DIR) + "/brown"; }

std::string ctest_dir(const char* variable) {
    const char* v = std::getenv(variable);
    if (!v || !*v) ADD_FAILURE() << variable << " is not set; run this test through ctest, which sets it";
    return v ? v : "";
}

}  // namespace gpt::test
