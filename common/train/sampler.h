// Text generation: from a prompt (or <|endoftext|>), sample one token at a time with temperature
// and top-k, stop at <|endoftext|> or after n tokens.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "train/gpt.h"
#include "util/error.h"
#include "util/rng.h"
#include "util/utf8.h"  // sanitize_utf8

namespace gpt {

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

// The tokens that continue `prompt` (at least one token; the trainer's samples start from
// <|endoftext|>): n_tokens of them, fewer if the model picks <|endoftext|>. The prompt runs once,
// then one token per call with the key/value cache (GPT::forward_cached), so each token costs
// one pass over the context instead of a forward over all of it. When the context window is
// full, the last 3/4 of it run again as a new prompt and generation goes on from there.
// on_token(tokens so far) is called after each new token (for printing as they come).
template <class S, class OnToken>
std::vector<int> generate_tokens(GPT<S>& model, std::vector<int> prompt, int n_tokens, float temperature, int top_k,
                                 Rng& rng, OnToken&& on_token) {
    if (prompt.empty()) throw Error("text generation needs at least one token to start from");
    const int window = model.max_seq();
    std::vector<int> context;  // what the cache holds, in order
    std::vector<int> generated;
    auto run = [&](const std::vector<int>& tokens, int past) {
        model.forward_cached(tokens.data(), static_cast<int>(tokens.size()), past);
        context.insert(context.end(), tokens.begin(), tokens.end());
        return model.logits_at(0, static_cast<int>(tokens.size()) - 1);
    };
    auto restart = [&](std::vector<int> tokens, int keep) {
        context.clear();
        if (static_cast<int>(tokens.size()) > keep) tokens.erase(tokens.begin(), tokens.end() - keep);
        return run(tokens, 0);
    };
    std::vector<float> logits = restart(std::move(prompt), window);
    for (int i = 0; i < n_tokens; ++i) {
        const int next = sample_token(logits, temperature, top_k, rng);
        if (next == Tokenizer::kEndOfText) break;
        generated.push_back(next);
        on_token(generated);
        if (i + 1 == n_tokens) break;
        if (static_cast<int>(context.size()) < window) {
            logits = run({next}, static_cast<int>(context.size()));
        } else {
            std::vector<int> all = context;
            all.push_back(next);
            logits = restart(std::move(all), std::max(1, window * 3 / 4));
        }
    }
    return generated;
}

// The text of generated tokens: decoded (with invalid UTF-8 replaced), or the ids when there is
// no tokenizer.
inline std::string tokens_text(const Tokenizer* tokenizer, const std::vector<int>& tokens) {
    if (tokenizer) return sanitize_utf8(tokenizer->decode(tokens));
    std::string ids;
    for (int t : tokens) ids += (ids.empty() ? "" : " ") + std::to_string(t);
    return ids;
}

// A sample from <|endoftext|>, as the trainer prints every --sample-every steps.
template <class S>
std::string generate(GPT<S>& model, const Tokenizer* tokenizer, int n_tokens, float temperature, int top_k,
                     Rng& rng) {
    const std::vector<int> tokens = generate_tokens(model, {Tokenizer::kEndOfText}, n_tokens, temperature, top_k,
                                                    rng, [](const std::vector<int>&) {});
    return tokens_text(tokenizer, tokens);
}

}  // namespace gpt
