#include "model/config.h"

#include "model/params.h"
#include "util/error.h"

namespace gpt {

namespace {
struct NamedConfig {
    const char* name;
    GPTConfig config;
};
// maxT, V, L, H, C
const NamedConfig kConfigs[] = {
    {"micro", {64, 50257, 2, 4, 64}},
    {"tiny", {128, 50257, 4, 4, 128}},
    {"d12", {1024, 50257, 12, 12, 768}},
    {"d24", {1024, 50257, 24, 16, 1024}},
    {"d36", {1024, 50257, 36, 20, 1280}},
    {"d48", {1024, 50257, 48, 25, 1600}},
};
}  // namespace

std::string GPTConfig::describe() const {
    return "L=" + std::to_string(n_layer) + " H=" + std::to_string(n_head) + " C=" + std::to_string(n_embd) +
           " maxT=" + std::to_string(max_seq_len) + " V=" + std::to_string(vocab_size);
}

std::vector<std::string> config_names() {
    std::vector<std::string> names;
    for (const auto& c : kConfigs) names.push_back(c.name);
    return names;
}

GPTConfig config_by_name(const std::string& name) {
    std::string known;
    for (const auto& c : kConfigs) {
        if (name == c.name) return c.config;
        known += known.empty() ? c.name : std::string(", ") + c.name;
    }
    throw Error("unknown model '" + name + "' (known: " + known + ")");
}

void validate_config(const GPTConfig& c) {
    if (c.max_seq_len <= 0 || c.vocab_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0)
        throw Error("invalid model config (" + c.describe() + "): every size must be positive");
    if (c.n_embd % c.n_head != 0)
        throw Error("invalid model config (" + c.describe() + "): C must be divisible by H");
    // Far above any GPT (GPT-3 175B: C = 12288, L = 96), and low enough that no size computed
    // from them overflows: a checkpoint's header comes from a file, and a hostile one must not
    // wrap the parameter count around to match a small file.
    if (c.max_seq_len > (1 << 20) || c.vocab_size > (1 << 24) || c.n_layer > (1 << 12) || c.n_embd > (1 << 16))
        throw Error("invalid model config (" + c.describe() + "): larger than maxT 1048576, V 16777216, L 4096 or "
                    "C 65536");
}

double flops_per_token(const GPTConfig& c, int T) {
    const double N = static_cast<double>(ParamLayout(c).total());
    return 6.0 * N + 12.0 * c.n_layer * c.n_head * c.head_size() * static_cast<double>(T);
}

}  // namespace gpt
