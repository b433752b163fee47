// Model config, parameter layout, initialisation, checkpoints and the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/params.h"
#include "testing/compare.h"
#include "train/schedule.h"
#include "util/error.h"

using namespace gpt;
namespace fs = std::filesystem;

namespace {

std::string temp_dir() {
    const char* base = std::getenv("GPT_TEST_OUT");
    fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) / "test_model";
    fs::create_directories(dir);
    return dir.string();
}

// A checkpoint with random parameters and optimizer state.
Checkpoint random_checkpoint(const GPTConfig& c) {
    Rng rng(test::test_seed());
    Checkpoint ck;
    ck.config = c;
    ck.step = 17;
    const size_t n = ParamLayout(c).total();
    ck.params = test::random_normal(rng, n);
    ck.m = test::random_normal(rng, n, 0.01f);
    ck.v = test::random_uniform(rng, n, 0.0f, 1e-4f);
    return ck;
}

void expect_error_mentions(const std::function<void()>& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "expected gpt::Error mentioning '" << needle << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "message must be one line";
    }
}

}  // namespace

TEST(Config, NamedSizes) {
    const GPTConfig d12 = config_by_name("d12");
    EXPECT_EQ(d12.n_layer, 12);
    EXPECT_EQ(d12.n_head, 12);
    EXPECT_EQ(d12.n_embd, 768);
    EXPECT_EQ(d12.max_seq_len, 1024);
    EXPECT_EQ(d12.vocab_size, 50257);
    // GPT-2 small: 124,439,808 parameters with the unpadded vocabulary (124,475,904 padded to 50304).
    EXPECT_EQ(ParamLayout(d12).total(), 124439808u);
    EXPECT_EQ(ParamLayout(d12, 50304).total(), 124475904u);
    for (const auto& name : config_names()) EXPECT_NO_THROW(validate_config(config_by_name(name))) << name;
}

TEST(Config, UnknownNameNamesIt) {
    expect_error_mentions([] { config_by_name("gpt5"); }, "gpt5");
}

TEST(Config, InvalidConfigsAreRejected) {
    GPTConfig c = config_by_name("micro");
    c.n_head = 5;  // 64 is not divisible by 5
    EXPECT_THROW(validate_config(c), Error);
    c = config_by_name("micro");
    c.n_layer = 0;
    EXPECT_THROW(validate_config(c), Error);
}

TEST(Config, FlopsPerToken) {
    const GPTConfig c = config_by_name("d12");
    const double N = 124439808.0;
    EXPECT_DOUBLE_EQ(flops_per_token(c, 1024), 6 * N + 12.0 * 12 * 12 * 64 * 1024);
}

TEST(Layout, TensorsAreContiguousAndSized) {
    const GPTConfig c = config_by_name("micro");
    const ParamLayout l(c);
    size_t at = 0;
    for (int t = 0; t < kNumParamTensors; ++t) {
        EXPECT_EQ(l.offset[t], at) << ParamLayout::name(t);
        at += l.size[t];
    }
    EXPECT_EQ(l.total(), at);
    EXPECT_EQ(l.size[kQkvW], size_t(2) * 3 * 64 * 64);
    EXPECT_EQ(l.size[kFcProjW], size_t(2) * 64 * 4 * 64);
    const ParamLayout padded(c, 50304);
    EXPECT_EQ(padded.size[kWte], size_t(50304) * 64);
    EXPECT_EQ(padded.total() - l.total(), size_t(50304 - 50257) * 64);
}

TEST(Layout, PadAndUnpadRoundTrip) {
    const GPTConfig c = config_by_name("micro");
    Rng rng(test::test_seed());
    const auto p = test::random_normal(rng, ParamLayout(c).total());
    const auto padded = pad_vocab(p, c, 50304);
    const ParamLayout pl(c, 50304);
    for (size_t i = size_t(50257) * 64; i < pl.size[kWte]; ++i) ASSERT_EQ(padded[pl.offset[kWte] + i], 0.0f);
    EXPECT_EQ(unpad_vocab(padded, c, 50304), p);
}

TEST(Init, FollowsTheGpt2Scheme) {
    const GPTConfig c = config_by_name("tiny");
    const auto p = init_parameters(c, 42);
    const ParamLayout l(c);
    auto stddev = [&](int t) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < l.size[t]; ++i) {
            const double x = p[l.offset[t] + i];
            s += x;
            s2 += x * x;
        }
        const double n = l.size[t];
        return std::sqrt(s2 / n - (s / n) * (s / n));
    };
    EXPECT_NEAR(stddev(kWte), 0.02, 0.0005);
    EXPECT_NEAR(stddev(kQkvW), 0.02, 0.001);
    EXPECT_NEAR(stddev(kFcProjW), 0.02 / std::sqrt(2.0 * c.n_layer), 0.001);
    for (int t : {kLn1W, kLn2W, kLnfW})
        for (size_t i = 0; i < l.size[t]; ++i) ASSERT_EQ(p[l.offset[t] + i], 1.0f);
    for (int t : {kLn1B, kQkvB, kAttProjB, kLn2B, kFcB, kFcProjB, kLnfB})
        for (size_t i = 0; i < l.size[t]; ++i) ASSERT_EQ(p[l.offset[t] + i], 0.0f);
}

TEST(Init, IsDeterministicPerSeed) {
    const GPTConfig c = config_by_name("micro");
    EXPECT_EQ(init_parameters(c, 7), init_parameters(c, 7));
    EXPECT_NE(init_parameters(c, 7), init_parameters(c, 8));
}

TEST(Checkpoint, RoundTripWithOptimizerState) {
    const std::string path = temp_dir() + "/roundtrip.ckpt";
    const Checkpoint ck = random_checkpoint(config_by_name("micro"));
    save_checkpoint(path, ck);
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    const Checkpoint back = load_checkpoint(path);
    EXPECT_TRUE(back.config == ck.config);
    EXPECT_EQ(back.step, 17);
    EXPECT_EQ(back.params, ck.params);
    EXPECT_EQ(back.m, ck.m);
    EXPECT_EQ(back.v, ck.v);
}

TEST(Checkpoint, RoundTripParametersOnly) {
    const std::string path = temp_dir() + "/params_only.ckpt";
    Checkpoint ck = random_checkpoint(config_by_name("micro"));
    ck.m.clear();
    ck.v.clear();
    save_checkpoint(path, ck);
    const Checkpoint back = load_checkpoint(path);
    EXPECT_EQ(back.params, ck.params);
    EXPECT_TRUE(back.m.empty());
    EXPECT_EQ(fs::file_size(path), 1024 + ck.params.size() * 4);
}

TEST(Checkpoint, MissingFileNamesIt) {
    expect_error_mentions([] { load_checkpoint("/nonexistent/x.ckpt"); }, "/nonexistent/x.ckpt");
}

class CorruptCheckpoint : public ::testing::Test {
  protected:
    void SetUp() override {
        path_ = temp_dir() + "/corrupt.ckpt";
        save_checkpoint(path_, random_checkpoint(config_by_name("micro")));
    }
    void poke(std::streamoff at, const void* bytes, size_t n) {
        std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(at);
        f.write(static_cast<const char*>(bytes), n);
    }
    std::string path_;
};

TEST_F(CorruptCheckpoint, BadMagic) {
    const int32_t magic = 20240520;  // a shard's magic, not a checkpoint's
    poke(0, &magic, 4);
    expect_error_mentions([&] { load_checkpoint(path_); }, "bad magic");
}

TEST_F(CorruptCheckpoint, BadVersion) {
    const int32_t version = 9;
    poke(4, &version, 4);
    expect_error_mentions([&] { load_checkpoint(path_); }, "version");
}

TEST_F(CorruptCheckpoint, ConfigDoesNotMatchCount) {
    const int32_t layers = 3;
    poke(16, &layers, 4);
    expect_error_mentions([&] { load_checkpoint(path_); }, "corrupt");
}

TEST_F(CorruptCheckpoint, Truncated) {
    fs::resize_file(path_, fs::file_size(path_) - 100);
    expect_error_mentions([&] { load_checkpoint(path_); }, "truncated");
}

TEST_F(CorruptCheckpoint, FlippedPayloadByte) {
    const char byte = 0x55;
    poke(1024 + 4 * 12345 + 2, &byte, 1);
    expect_error_mentions([&] { load_checkpoint(path_); }, "checksum");
}

TEST_F(CorruptCheckpoint, EmptyFile) {
    fs::resize_file(path_, 0);
    expect_error_mentions([&] { load_checkpoint(path_); }, path_);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
    const float lr = 6e-4f;
    EXPECT_FLOAT_EQ(learning_rate(0, 100, 10, lr, 0.1f), lr / 10);
    EXPECT_FLOAT_EQ(learning_rate(9, 100, 10, lr, 0.1f), lr);
    EXPECT_FLOAT_EQ(learning_rate(10, 100, 10, lr, 0.1f), lr);
    EXPECT_NEAR(learning_rate(55, 100, 10, lr, 0.1f), 0.5f * (lr + 0.1f * lr), 1e-9);
    EXPECT_NEAR(learning_rate(100, 100, 10, lr, 0.1f), 0.1f * lr, 1e-9);
    for (int s = 11; s < 100; ++s) EXPECT_LE(learning_rate(s, 100, 10, lr, 0.1f), learning_rate(s - 1, 100, 10, lr, 0.1f));
    EXPECT_FLOAT_EQ(learning_rate(0, 20, 0, lr, 0.1f), lr);  // no warmup: the peak at once
}
