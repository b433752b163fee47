// llm.c model files (docs/formats.md, "llm.c model files"): GPT-2 weights as llm.c distributes
// them (gpt2_124M.bin, gpt2_124M_bf16.bin), so that a run can start from GPT-2's released
// parameters. The 16 tensors are those of our layout, in our order, but wte holds Vp rows (the
// padded vocabulary) and the elements may be bf16. Also what tells model files apart (--init
// takes three kinds).
#pragma once
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"

namespace gpt {

constexpr int kLlmcMagic = 20240326;
constexpr int kLlmcVersionFp32 = 3;  // parameters as fp32
constexpr int kLlmcVersionBf16 = 5;  // parameters as bf16: the upper 16 bits of an fp32

// What an llm.c model file holds besides the model itself.
struct LlmcFormat {
    int version = kLlmcVersionFp32;
    int padded_vocab = 0;  // Vp, rows of wte in the file
};

// Verifies every rule of the format (magic, version, config, Vp >= V, zero header words, exact
// size, finite values) and returns the parameters in our file layout (V rows of wte; the padded
// rows are skipped, whatever they hold), step 0, no optimizer state, no run state. `format`, if
// given, receives the version and Vp. Throws gpt::Error naming the file and the rule broken.
Checkpoint load_llmc_model(const std::string& path, LlmcFormat* format = nullptr);

// Writes `params` (our layout) as an llm.c model file of `version` (3: fp32; 5: bf16, rounded to
// nearest even) with `padded_vocab` rows of wte, the padded ones zero. Atomic, like
// save_checkpoint. Refuses non-finite values, values beyond bf16's range in version 5, and
// padded_vocab < V.
void save_llmc_model(const std::string& path, const GPTConfig& config, const std::vector<float>& params,
                     int padded_vocab, int version = kLlmcVersionFp32);

// The kind of a model file: by its magic number (a checkpoint, an llm.c model file), or a
// safetensors file (an 8-byte header length, then '{'), or a directory holding model.safetensors
// (Hugging Face's layout). Anything else (a file shorter than 4 bytes too) is a gpt::Error naming
// the three formats.
enum class ModelFileKind { kCheckpoint, kLlmc, kSafetensors };
ModelFileKind model_file_kind(const std::string& path);

// Any kind of model file: a checkpoint of this project (load_checkpoint), an llm.c model file
// (load_llmc_model) or GPT-2 in Hugging Face's safetensors layout (load_hf_gpt2). `notes`, if
// given, receives what was read, one line each, for the banner (nothing for a checkpoint).
Checkpoint load_model_file(const std::string& path, std::vector<std::string>* notes = nullptr);

}  // namespace gpt
