#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "util/bf16.h"
#include "util/error.h"
#include "util/rng.h"

namespace gpt {

ParamLayout::ParamLayout(const GPTConfig& c, int vocab_rows) {
    const size_t V = vocab_rows > 0 ? vocab_rows : c.vocab_size;
    const size_t C = c.n_embd, L = c.n_layer, maxT = c.max_seq_len;
    size = {V * C,     maxT * C, L * C,     L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
            L * C,     L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    size_t at = 0;
    for (int i = 0; i < kNumParamTensors; ++i) {
        offset[i] = at;
        at += size[i];
    }
}

const char* ParamLayout::name(int tensor) {
    static const char* const kNames[kNumParamTensors] = {
        "wte", "wpe", "ln1_w", "ln1_b", "qkv_w", "qkv_b", "attproj_w", "attproj_b",
        "ln2_w", "ln2_b", "fc_w", "fc_b", "fcproj_w", "fcproj_b", "lnf_w", "lnf_b"};
    return kNames[tensor];
}

bool ParamLayout::decays(int t) {
    return t == kWte || t == kWpe || t == kQkvW || t == kAttProjW || t == kFcW || t == kFcProjW;
}

std::vector<float> init_parameters(const GPTConfig& config, uint64_t seed) {
    validate_config(config);
    const ParamLayout layout(config);
    std::vector<float> params(layout.total(), 0.0f);
    Rng rng(seed);
    const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
    for (int t = 0; t < kNumParamTensors; ++t) {
        float* p = params.data() + layout.offset[t];
        const size_t n = layout.size[t];
        if (t == kLn1W || t == kLn2W || t == kLnfW) {
            std::fill(p, p + n, 1.0f);
        } else if (ParamLayout::decays(t)) {
            const double std = (t == kAttProjW || t == kFcProjW) ? residual_std : 0.02;
            for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(std * rng.normal());
        }  // biases stay 0
    }
    return params;
}

namespace {
std::vector<float> relayout(const std::vector<float>& src, const ParamLayout& from, const ParamLayout& to,
                            size_t wte_copy) {
    if (src.size() != from.total())
        throw Error("parameter array has " + std::to_string(src.size()) + " elements, layout expects " +
                    std::to_string(from.total()));
    std::vector<float> dst(to.total(), 0.0f);
    for (int t = 0; t < kNumParamTensors; ++t) {
        const size_t n = t == kWte ? wte_copy : from.size[t];
        std::copy_n(src.begin() + from.offset[t], n, dst.begin() + to.offset[t]);
    }
    return dst;
}
}  // namespace

std::string param_position(const GPTConfig& config, size_t index) {
    const ParamLayout layout(config);
    int t = 0;
    while (t + 1 < kNumParamTensors && index >= layout.offset[t + 1]) ++t;
    return std::to_string(index - layout.offset[t]) + " of " + ParamLayout::name(t);
}

std::string first_non_finite(const std::vector<float>& values, const GPTConfig& config, const char* what) {
    for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
            return std::string(what) + " " + param_position(config, i) + " is " + (std::isnan(values[i]) ? "nan" : "inf");
    return "";
}

std::string first_beyond_bf16(const std::vector<float>& values, const GPTConfig& config, const char* what) {
    for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(round_to_bf16(values[i]))) {
            char value[32];
            std::snprintf(value, sizeof(value), "%g", values[i]);
            return std::string(what) + " " + param_position(config, i) + " is " + value + ", beyond the range of bf16";
        }
    return "";
}

std::vector<float> pad_vocab(const std::vector<float>& params, const GPTConfig& c, int vocab_rows) {
    if (vocab_rows < c.vocab_size) throw Error("padded vocabulary smaller than the vocabulary");
    return relayout(params, ParamLayout(c), ParamLayout(c, vocab_rows), size_t(c.vocab_size) * c.n_embd);
}

std::vector<float> unpad_vocab(const std::vector<float>& params, const GPTConfig& c, int vocab_rows) {
    if (vocab_rows < c.vocab_size) throw Error("padded vocabulary smaller than the vocabulary");
    return relayout(params, ParamLayout(c, vocab_rows), ParamLayout(c), size_t(c.vocab_size) * c.n_embd);
}

}  // namespace gpt
