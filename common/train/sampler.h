// Text generation from the model being trained: start from <|endoftext|>, sample one token at
// a time with temperature and top-k, stop at <|endoftext|> or after n tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "train/gpt.h"
#include "util/rng.h"

namespace gpt {

// Replaces bytes that are not valid UTF-8 (a sample may stop inside a character) with U+FFFD.
inline std::string sanitize_utf8(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = s[i];
        const int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
        if (ok) {
            out.append(s, i, len);
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

// Picks a token from logits: keep the top_k largest (0: all), softmax at the temperature, draw.
inline int sample_token(const std::vector<float>& logits, float temperature, int top_k, Rng& rng) {
    std::vector<int> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    size_t k = top_k > 0 ? std::min<size_t>(top_k, ids.size()) : ids.size();
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                      [&](int a, int b) { return logits[a] > logits[b]; });
    const float maxv = logits[ids[0]];
    std::vector<double> p(k);
    double sum = 0.0;
    for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((logits[ids[i]] - maxv) / temperature);
    double u = rng.uniform() * sum;
    for (size_t i = 0; i < k; ++i) {
        if ((u -= p[i]) <= 0.0) return ids[i];
    }
    return ids[k - 1];
}

template <class S>
std::string generate(GPT<S>& model, const Tokenizer* tokenizer, int n_tokens, float temperature, int top_k,
                     Rng& rng) {
    std::vector<int> tokens = {Tokenizer::kEndOfText};
    std::vector<int> generated;
    for (int i = 0; i < n_tokens; ++i) {
        // The model is causal: run only the tokens so far (the last max_seq() of them).
        const int T = std::min<int>(static_cast<int>(tokens.size()), model.max_seq());
        const std::vector<int> context(tokens.end() - T, tokens.end());
        model.forward(context.data(), nullptr, 1, T);
        const int next = sample_token(model.logits_at(0, T - 1), temperature, top_k, rng);
        if (next == Tokenizer::kEndOfText) break;
        tokens.push_back(next);
        generated.push_back(next);
    }
    if (tokenizer) return sanitize_utf8(tokenizer->decode(generated));
    std::string ids;
    for (int t : generated) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    return ids;
}

}  // namespace gpt
