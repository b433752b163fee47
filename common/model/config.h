// GPT-2 model configuration and the named sizes of docs/formats.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct GPTConfig {
    int max_seq_len = 1024;  // maxT: rows of the position embedding
    int vocab_size = 50257;  // V
    int n_layer = 12;        // L
    int n_head = 12;         // H
    int n_embd = 768;        // C

    int head_size() const { return n_embd / n_head; }
    // [stage switch kVocabMultiple]
    // The vocabulary rounded up to a multiple (stages that pad it use 64 or 128).
    int padded_vocab(int multiple) const { return (vocab_size + multiple - 1) / multiple * multiple; }
    // [end stage switch kVocabMultiple]
    bool operator==(const GPTConfig& o) const {
        return max_seq_len == o.max_seq_len && vocab_size == o.vocab_size && n_layer == o.n_layer &&
               n_head == o.n_head && n_embd == o.n_embd;
    }
    std::string describe() const;  // "L=12 H=12 C=768 maxT=1024 V=50257"
};

// Throws gpt::Error naming the model and listing the known names.
GPTConfig config_by_name(const std::string& name);
std::vector<std::string> config_names();

// Throws gpt::Error if the numbers do not make a valid model (C divisible by H, all positive,
// none absurdly large).
void validate_config(const GPTConfig& config);

// Training FLOPs per token, 6N + 12·L·H·Q·T (docs: MFU), with N the unpadded parameter count.
double flops_per_token(const GPTConfig& config, int T);

}  // namespace gpt
