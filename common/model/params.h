// The flat parameter layout of docs/formats.md: 16 tensors, one array.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace gpt {

enum ParamTensor {
    kWte, kWpe, kLn1W, kLn1B, kQkvW, kQkvB, kAttProjW, kAttProjB,
    kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kLnfW, kLnfB,
    kNumParamTensors
};

struct ParamLayout {
    // vocab_rows: rows of wte in memory (the padded vocabulary); 0 means V (as in files).
    explicit ParamLayout(const GPTConfig& config, int vocab_rows = 0);

    std::array<size_t, kNumParamTensors> size{};    // elements per tensor
    std::array<size_t, kNumParamTensors> offset{};  // start of each tensor in the flat array
    size_t total() const { return offset[kNumParamTensors - 1] + size[kNumParamTensors - 1]; }

    static const char* name(int tensor);
    static bool decays(int tensor);  // weight decay applies (matrices and embeddings)
};

// Seeded GPT-2 initialisation (docs/formats.md), unpadded layout.
std::vector<float> init_parameters(const GPTConfig& config, uint64_t seed);

// [stage switch kVocabMultiple]
// Moves between the file layout (V rows of wte) and a padded one (vocab_rows of wte, extra
// rows zero). With vocab_rows == V both are copies.
std::vector<float> pad_vocab(const std::vector<float>& params, const GPTConfig& config, int vocab_rows);
std::vector<float> unpad_vocab(const std::vector<float>& params, const GPTConfig& config, int vocab_rows);
// [end stage switch kVocabMultiple]

// Where element `index` of the flat file layout lies, by tensor: "12 of wte".
std::string param_position(const GPTConfig& config, size_t index);

// "" when every value is finite, else the first that is not, by tensor ("parameter 12 of wte is
// nan"); `values` in the file layout of `config` (parameters, or an AdamW moment of them).
std::string first_non_finite(const std::vector<float>& values, const GPTConfig& config, const char* what);

// "" when every value rounds to a finite bf16, else the first that does not ("parameter 3 of
// wpe is 3.4e+38, beyond the range of bf16"): for files written in bf16.
std::string first_beyond_bf16(const std::vector<float>& values, const GPTConfig& config, const char* what);

}  // namespace gpt
