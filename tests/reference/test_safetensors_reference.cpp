// The Hugging Face safetensors export and import (common/model/safetensors.h) against an
// independent reader and writer: tests/reference/safetensors_reference.py, which shares no code
// with the C++ side and puts the tensors into the PyTorch reference's model (model.py).
//
//   export: make_safetensors_inputs saves a random model as exported.ckpt and exports it to
//           exported/; Python reads exported/model.safetensors into its GPT and writes the logits
//           (exported_logits.bin). This project's CPU model, built from exported.ckpt (not from the
//           safetensors file), must give the same logits.
//   import: Python writes a random GPT-2 as transformers does (python_f32, python_bf16 with the
//           causal-mask buffers and no config.json, python_f16 with lm_head.weight) and the logits
//           of exactly the stored values; gpt::load_hf_gpt2 imports each and the CPU model must
//           give the same logits.
//
// The files come from the CTest fixtures safetensors_inputs and safetensors_python, into
// $GPT_TEST_OUT/reference/safetensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cpu/reference_stage.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/reference_case.h"
#include "train/gpt.h"
#include "util/file.h"
#include "util/json.h"

using namespace gpt;
using namespace gpt::test;

namespace {

// Both sides compute the forward pass in fp32 from the same fp32 parameters; only the order of
// the additions differs (the CPU reference sums one term after another, PyTorch in blocks). So the
// bound is an fp32 one, on the relative L2 error of all B*T*V logits. Measured (PyTorch 1.13 on the
// CPU, seeds 1 to 6): 4.2e-7 to 5.4e-7 for the exported model, 6.4e-7 to 7.4e-7 for the three
// Python files (about 10u, u = 2^-24 = 6e-8). 1e-5 leaves a margin over 13 and stays far below
// what a wrong tensor gives: rounding every parameter to fp16 alone moves the logits by 7e-4, two
// swapped LayerNorm weights by 0.3, one square matrix left untransposed by about 1.
constexpr double kLogitsRelL2 = 1e-5;

std::string case_dir() { return reference_output_dir() + "/safetensors"; }

struct Tokens {
    int B = 0, T = 0;
    std::vector<int> ids;  // B*T, row by row
    std::string seed;      // the seed that drew the case (GPT_TEST_SEED=<seed> repeats it)
};

// tokens.json and the int32 file it names, as make_safetensors_inputs writes them.
Tokens load_tokens() {
    const Json meta = Json::parse_file(case_dir() + "/tokens.json");
    Tokens t;
    t.B = static_cast<int>(meta["batch"].number);
    t.T = static_cast<int>(meta["seq"].number);
    t.seed = meta["seed"].string;
    const std::string raw = read_regular_file(case_dir() + "/" + meta["file"].string, "tokens", 1 << 20);
    if (raw.size() != size_t(t.B) * t.T * sizeof(int32_t))
        throw Error("tokens: " + std::to_string(raw.size()) + " bytes for " + std::to_string(t.B) + " x " +
                    std::to_string(t.T) + " int32 ids");
    std::vector<int32_t> ids(size_t(t.B) * t.T);
    std::memcpy(ids.data(), raw.data(), raw.size());
    t.ids.assign(ids.begin(), ids.end());
    return t;
}

// This project's CPU model's logits of every position, B*T rows of V, as the Python side writes them.
std::vector<float> cpu_logits(const GPTConfig& config, const std::vector<float>& params, const Tokens& tokens) {
    GPT<CpuReference> model(config, tokens.B, tokens.T);
    model.set_parameters(params);
    model.forward(tokens.ids.data(), nullptr, tokens.B, tokens.T);
    std::vector<float> logits;
    for (int b = 0; b < tokens.B; ++b)
        for (int t = 0; t < tokens.T; ++t) {
            const std::vector<float> row = model.logits_at(b, t);
            logits.insert(logits.end(), row.begin(), row.end());
        }
    return logits;
}

bool mentions(const std::vector<std::string>& notes, const std::string& text) {
    for (const std::string& note : notes)
        if (note.find(text) != std::string::npos) return true;
    return false;
}

std::string joined(const std::vector<std::string>& notes) {
    std::string s;
    for (const std::string& note : notes) s += "\n  " + note;
    return s;
}

class AgainstPythonSafetensors : public ::testing::Test {
  protected:
    void SetUp() override {
        for (const char* name : {"exported_logits.bin", "python_f32_logits.bin", "python_bf16_logits.bin",
                                 "python_f16_logits.bin"}) {
            const std::string path = case_dir() + "/" + name;
            if (std::filesystem::exists(path)) continue;
            if (torch_required()) FAIL() << "REQUIRE_TORCH=1 but the Python side did not produce " << path;
            GTEST_SKIP() << "no output of tests/reference/safetensors_reference.py (" << path
                         << "): install python3-torch, or see tests/reference/README.md";
        }
        tokens_ = load_tokens();
    }

    // Imports python_NAME/ and compares its CPU logits with the Python side's; returns the import.
    HfImport expect_import_matches(const std::string& name) {
        const HfImport imported = load_hf_gpt2(case_dir() + "/python_" + name);
        SCOPED_TRACE("import notes:" + joined(imported.notes));
        const std::vector<float> theirs = read_floats(case_dir() + "/python_" + name + "_logits.bin");
        const std::vector<float> mine = cpu_logits(imported.checkpoint.config, imported.checkpoint.params, tokens_);
        EXPECT_TRUE(rel_l2_close("logits of the imported python_" + name + " (" +
                                     imported.checkpoint.config.describe() + ", case seed " + tokens_.seed + ")",
                                 mine, theirs, kLogitsRelL2));
        return imported;
    }

    Tokens tokens_;
};

}  // namespace

// What save_hf_gpt2 wrote, read by PyTorch with its own reader, is the model this project holds.
TEST_F(AgainstPythonSafetensors, ExportedFileGivesPyTorchTheSameLogits) {
    const Checkpoint ck = load_checkpoint(case_dir() + "/exported.ckpt");
    const std::vector<float> theirs = read_floats(case_dir() + "/exported_logits.bin");
    EXPECT_TRUE(rel_l2_close("logits of PyTorch on exported/model.safetensors (" + ck.config.describe() +
                                 ", case seed " + tokens_.seed + ")",
                             cpu_logits(ck.config, ck.params, tokens_), theirs, kLogitsRelL2));
}

// fp32, GPT2LMHeadModel keys ("transformer." prefix), config.json with 4 heads (not C / 64 = 2).
TEST_F(AgainstPythonSafetensors, ImportsFp32WithPrefixAndConfig) {
    const HfImport imported = expect_import_matches("f32");
    EXPECT_EQ(imported.checkpoint.config.n_head, 4) << "n_head must come from config.json";
}

// bf16, GPT2Model keys as in GPT-2's released file, with its causal-mask buffers (fp32, in the
// same file), and no config.json: the sizes come from the shapes, n_head = C / 64.
TEST_F(AgainstPythonSafetensors, ImportsBf16WithMaskBuffersAndNoConfig) {
    const HfImport imported = expect_import_matches("bf16");
    const GPTConfig& c = imported.checkpoint.config;
    EXPECT_EQ(c.n_head, c.n_embd / 64);
    EXPECT_TRUE(mentions(imported.notes, "causal-mask")) << "the notes must say the mask buffers were ignored:"
                                                         << joined(imported.notes);
    EXPECT_TRUE(mentions(imported.notes, "no config.json beside it: sizes from the tensors' shapes"))
        << "the notes must say the sizes came from the shapes alone:" << joined(imported.notes);
}

// fp16, with lm_head.weight written out (equal to wte.weight) and a config.json.
TEST_F(AgainstPythonSafetensors, ImportsFp16WithLmHead) {
    const HfImport imported = expect_import_matches("f16");
    EXPECT_EQ(imported.checkpoint.config.n_head, 4) << "n_head must come from config.json";
    EXPECT_TRUE(mentions(imported.notes, "lm_head")) << joined(imported.notes);
}
