// Text generation with the key/value cache (GPT::forward_cached, train/sampler.h) on the CPU
// reference: the cache must change the cost of generation, never its result. The GPU stages are
// held to the same by tests/gpu/stage_tests.cuh (Model.CachedGenerationMatchesTheFullForward).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "cpu/reference_stage.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/tolerance.h"
#include "train/generate.h"
#include "train/gpt.h"
#include "train/sampler.h"
#include "util/rng.h"

namespace {

using Model = gpt::GPT<gpt::CpuReference>;

// Small and odd: a context of 24, a vocabulary of 301 (so <|endoftext|>, 50256, is never drawn
// and every generation runs its full length), head size 16.
gpt::GPTConfig small_config() {
    gpt::GPTConfig c;
    c.max_seq_len = 24;
    c.vocab_size = 301;
    c.n_layer = 2;
    c.n_head = 3;
    c.n_embd = 48;
    return c;
}

std::vector<float> logits_of(Model& model, int positions) {
    std::vector<float> all;
    for (int t = 0; t < positions; ++t) {
        const std::vector<float> row = model.logits_at(0, t);
        all.insert(all.end(), row.begin(), row.end());
    }
    return all;
}

// Generation the slow way: a full forward over the context for every token, with the same
// window rule as generate_tokens (when the window is full, keep its last 3/4) and the same draws.
std::vector<int> generate_without_cache(Model& model, std::vector<int> context, int n, float temperature, int top_k,
                                        gpt::Rng& rng) {
    const int window = model.max_seq();
    if (int(context.size()) > window) context.erase(context.begin(), context.end() - window);
    std::vector<int> out;
    for (int i = 0; i < n; ++i) {
        const int T = int(context.size());
        model.forward(context.data(), nullptr, 1, T);
        const int next = gpt::sample_token(model.logits_at(0, T - 1), temperature, top_k, rng);
        out.push_back(next);
        context.push_back(next);
        if (int(context.size()) > window) context.erase(context.begin(), context.end() - window * 3 / 4);
    }
    return out;
}

// Initial weights scaled up, so that the context changes the next token: at GPT-2's initial
// scale the logits hardly depend on anything but the last token.
std::vector<float> weights_that_look_back(const gpt::GPTConfig& config, uint64_t seed) {
    std::vector<float> params = gpt::init_parameters(config, seed);
    for (float& p : params) p *= 6.0f;
    return params;
}

TEST(Generation, CachedForwardGivesTheLogitsOfTheFullForward) {
    const gpt::GPTConfig config = small_config();
    gpt::Rng rng(gpt::test::test_seed());
    const std::vector<int> tokens = gpt::test::random_tokens(rng, 23, config.vocab_size);
    Model model(config, 2, config.max_seq_len);
    model.set_parameters(weights_that_look_back(config, 11));

    model.forward(tokens.data(), nullptr, 1, 23);
    const std::vector<float> expected = logits_of(model, 23);

    // A prompt of 9, then one token at a time.
    std::vector<float> actual;
    model.forward_cached(tokens.data(), 9, 0);
    actual = logits_of(model, 9);
    for (int t = 9; t < 23; ++t) {
        model.forward_cached(tokens.data() + t, 1, t);
        const std::vector<float> row = model.logits_at(0, 0);
        actual.insert(actual.end(), row.begin(), row.end());
    }
    // A whole-model comparison, judged as the GPU stages' Model.CachedGenerationMatchesTheFullForward
    // is: by the relative L2 error of all the logits against the whole-model bound (tolerance.h).
    // kFp32's element-wise bound is one op's (a single reduction): through every layer of a
    // model whose weights are 6 times GPT-2's, a few of the 6,923 logits land past it (18 seeds
    // of 200, relative L2 error at most 3.7e-6), while a wrong cache position or a missing key
    // moves them by percents.
    EXPECT_TRUE(gpt::test::rel_l2_close("logits, cached vs full forward", actual, expected,
                                        gpt::test::kModelRelL2Fp32));
}

TEST(Generation, SamplesAreTheSameWithAndWithoutTheCache) {
    const gpt::GPTConfig config = small_config();
    gpt::Rng rng(gpt::test::test_seed() + 1);
    Model model(config, 1, config.max_seq_len);
    model.set_parameters(weights_that_look_back(config, 12));
    // A short prompt, and one longer than the window (it keeps its last 24 tokens); 60 tokens
    // fill the window and restart from its last 3/4 several times. Greedy, and drawn.
    for (const int prompt_length : {5, 40}) {
        for (const int top_k : {1, 0}) {
            SCOPED_TRACE(testing::Message() << "prompt of " << prompt_length << " tokens, top-k " << top_k);
            const std::vector<int> prompt = gpt::test::random_tokens(rng, prompt_length, config.vocab_size);
            gpt::Rng draws(gpt::test::test_seed() + 2), same_draws(gpt::test::test_seed() + 2);
            int calls = 0;
            const std::vector<int> cached = gpt::generate_tokens(model, prompt, 60, 1.0f, top_k, draws,
                                                                 [&](const std::vector<int>&) { ++calls; });
            EXPECT_EQ(calls, 60);
            const std::vector<int> uncached = generate_without_cache(model, prompt, 60, 1.0f, top_k, same_draws);
            EXPECT_EQ(cached, uncached);
            // The text depends on the context, or this test could not tell a broken cache.
            EXPECT_GT(std::set<int>(uncached.begin(), uncached.end()).size(), 3u);
        }
    }
}

TEST(Generation, RefusesPositionsBeyondTheModelsBuild) {
    const gpt::GPTConfig config = small_config();
    Model model(config, 1, 16);
    model.set_parameters(gpt::init_parameters(config, 13));
    const std::vector<int> tokens(17, 5);
    EXPECT_NE(gpt::test::error_of([&] { model.forward_cached(tokens.data(), 17, 0); }).find("do not fit"),
              std::string::npos);
    EXPECT_NE(gpt::test::error_of([&] { model.forward_cached(tokens.data(), 1, 16); }).find("do not fit"),
              std::string::npos);
    EXPECT_NE(gpt::test::error_of([&] {
                  gpt::Rng rng(1);
                  gpt::generate_tokens(model, {}, 4, 1.0f, 0, rng, [](const std::vector<int>&) {});
              }).find("at least one token"),
              std::string::npos);
}

TEST(Generation, PrintsWholeCharactersOnly) {
    EXPECT_EQ(gpt::complete_utf8_prefix("abc"), 3u);
    EXPECT_EQ(gpt::complete_utf8_prefix("caf\xc3"), 3u);         // é cut after its first byte
    EXPECT_EQ(gpt::complete_utf8_prefix("caf\xc3\xa9"), 5u);     // é whole
    EXPECT_EQ(gpt::complete_utf8_prefix("x\xe2\x80"), 1u);       // — cut after two of three bytes
    EXPECT_EQ(gpt::complete_utf8_prefix("x\xf0\x9f\x98\x80"), 5u);  // an emoji whole
    EXPECT_EQ(gpt::complete_utf8_prefix("x\xf0\x9f\x98"), 1u);      // an emoji cut
    EXPECT_EQ(gpt::complete_utf8_prefix(""), 0u);
}

}  // namespace
