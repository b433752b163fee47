// Model config, parameter layout, initialisation, checkpoints, llm.c model files and the
// learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

#ifdef __SANITIZE_ADDRESS__
// From the sanitizer runtime (GCC ships no header that declares it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

#include "cpu/reference_stage.h"
#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/llmc.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/place_in_group.h"
#include "testing/reference_run.h"
#include "train/loop.h"
#include "train/memory.h"
#include "train/policy.h"
#include "train/schedule.h"
#include "util/error.h"
#include "util/file.h"
#include "util/fnv.h"
#include "util/json.h"

using namespace gpt;
namespace fs = std::filesystem;

namespace {

// A directory of this test's own: CTest runs the tests of this file in parallel processes.
std::string temp_dir() {
    const char* base = std::getenv("GPT_TEST_OUT");
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) / "test_model" /
                   (std::string(test->test_suite_name()) + "." + test->name());
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

// Overwrites n bytes of the file at offset `at`.
void write_at(const std::string& path, std::streamoff at, const void* bytes, size_t n) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
    ASSERT_TRUE(f.good()) << path;
}

// The message of the gpt::Error that f throws; a test failure if it throws none.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "expected a gpt::Error";
    return "";
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
    // Sizes whose parameter count would overflow size_t (from a hostile checkpoint header).
    c = config_by_name("micro");
    c.n_layer = 1 << 30;
    EXPECT_THROW(validate_config(c), Error);
    c = config_by_name("micro");
    c.n_embd = c.n_head << 20;
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
    void poke(std::streamoff at, const void* bytes, size_t n) { write_at(path_, at, bytes, n); }
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
    expect_error_mentions([&] { load_checkpoint(path_); }, "does not match its config");
}

TEST_F(CorruptCheckpoint, FlippedStepCount) {  // the hash covers the header too
    const int32_t step = 18;
    poke(4 * 7, &step, 4);
    expect_error_mentions([&] { load_checkpoint(path_); }, "checksum");
}

TEST_F(CorruptCheckpoint, OptimizerFlagNotZeroOrOne) {
    const int32_t flag = 2;
    poke(4 * 8, &flag, 4);
    expect_error_mentions([&] { load_checkpoint(path_); }, "not 0 or 1");
}

TEST(Checkpoint, RunStateRoundTrips) {
    const std::string path = temp_dir() + "/run_state.ckpt";
    Checkpoint ck = random_checkpoint(config_by_name("micro"));
    RunState& r = ck.run;
    r.recorded = true;
    r.batch = 3, r.seq = 17, r.micro_batches = 2, r.world = 1, r.steps = 99, r.warmup = 5;
    r.lr = 6e-4f, r.min_lr_frac = 0.1f, r.weight_decay = 0.1f, r.beta1 = 0.9f, r.beta2 = 0.95f, r.eps = 1e-8f;
    r.grad_clip = 1.0f, r.seed = 0x123456789abcdefull, r.data_tokens = 5'000'000'000ll, r.data_shard = 7;
    r.data_pos = 3'000'000'000ll;
    for (int i = 0; i < 4; ++i) r.sample_rng[i] = 0xfedcba9876543210ull >> i;
    save_checkpoint(path, ck);
    const RunState b = load_checkpoint(path).run;
    EXPECT_TRUE(b.recorded);
    EXPECT_EQ(std::tie(b.batch, b.seq, b.micro_batches, b.world, b.steps, b.warmup),
              std::tie(r.batch, r.seq, r.micro_batches, r.world, r.steps, r.warmup));
    EXPECT_EQ(std::tie(b.lr, b.min_lr_frac, b.weight_decay, b.beta1, b.beta2, b.eps, b.grad_clip),
              std::tie(r.lr, r.min_lr_frac, r.weight_decay, r.beta1, r.beta2, r.eps, r.grad_clip));
    EXPECT_EQ(std::tie(b.seed, b.data_tokens, b.data_shard, b.data_pos),
              std::tie(r.seed, r.data_tokens, r.data_shard, r.data_pos));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(b.sample_rng[i], r.sample_rng[i]);
}

// A micro model's checkpoint of a trainer's run (B = 2, T = 16, 40 steps).
Checkpoint checkpoint_of_a_run() {
    Checkpoint ck = random_checkpoint(config_by_name("micro"));
    ck.run.recorded = true;
    ck.run.batch = 2, ck.run.seq = 16, ck.run.micro_batches = 1, ck.run.world = 1, ck.run.steps = 40;
    ck.run.data_tokens = 100;
    return ck;
}

// The run's options come back as they were given: any text, in order, and the header alone
// (load_checkpoint_header) reads them without the weights.
TEST(Checkpoint, RunOptionsRoundTrip) {
    const std::string path = temp_dir() + "/run_options.ckpt";
    Checkpoint ck = checkpoint_of_a_run();
    RunState& r = ck.run;
    r.options = {{"--steps", "40"}, {"--save", "runs/a b\n'c'.ckpt"}, {"--log", "\xc3\xa9t\xc3\xa9.jsonl"},
                 {"--lr", "0.00314159274"}};
    save_checkpoint(path, ck);
    EXPECT_EQ(load_checkpoint(path).run.options, r.options);
    const Checkpoint header = load_checkpoint_header(path);
    EXPECT_EQ(header.run.options, r.options);
    EXPECT_EQ(header.step, ck.step);
    EXPECT_TRUE(header.params.empty());
    EXPECT_EQ(fs::file_size(path), checkpoint_file_bytes(ck.config, true, r));
    // A flipped byte among them is found by the hash.
    const char flipped = '5';
    write_at(path, 1024 + 2, &flipped, 1);  // "--steps" becomes "--5teps"
    expect_error_mentions([&] { load_checkpoint(path); }, "checksum");
}

// Version 2 (before the run's options) is still read: its word 41 was reserved, and it has no
// options section.
TEST(Checkpoint, VersionTwoIsStillRead) {
    const std::string path = temp_dir() + "/version2.ckpt";
    const Checkpoint ck = checkpoint_of_a_run();
    save_checkpoint(path, ck);  // no options: word 41 is 0 and nothing follows the header
    const int32_t two = 2;
    write_at(path, 4, &two, 4);
    // The hash covers the version word: recompute it as a version 2 writer did.
    std::string bytes = read_regular_file(path, "checkpoint");
    int32_t hash_word = 0;
    std::memcpy(bytes.data() + 40, &hash_word, 4);
    const uint32_t hash = fnv1a(bytes.data(), bytes.size());
    write_at(path, 40, &hash, 4);
    const Checkpoint back = load_checkpoint(path);
    EXPECT_EQ(back.params, ck.params);
    EXPECT_EQ(back.run.steps, 40);
    EXPECT_TRUE(back.run.options.empty());
    const int32_t nine = 9;  // a set word 41 is not version 2
    write_at(path, 4 * 41, &nine, 4);
    expect_error_mentions([&] { load_checkpoint(path); }, "reserved header word 41 is not zero");
}

// A save that fails at the end of a run keeps the weights in a second place and says where, with
// the command that continues from there.
TEST(Checkpoint, FailedSaveKeepsTheWeightsElsewhere) {
    const std::string dir = temp_dir() + "/keep_elsewhere";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const char* old_tmpdir = std::getenv("TMPDIR");
    const std::string saved_tmpdir = old_tmpdir ? old_tmpdir : "";
    setenv("TMPDIR", dir.c_str(), 1);
    TrainOptions opt;
    opt.program = "./train";
    opt.save = "/proc/no_such_folder/run.ckpt";  // no file can be made there, not even by root
    Checkpoint ck = random_checkpoint(config_by_name("micro"));
    const std::string text = keep_elsewhere(opt, ck);
    if (old_tmpdir) setenv("TMPDIR", saved_tmpdir.c_str(), 1);
    else unsetenv("TMPDIR");
    EXPECT_EQ(text, "the weights of step 17 are kept in " + dir + "/run.ckpt instead; continue with: ./train "
                    "--resume " + dir + "/run.ckpt");
    EXPECT_EQ(load_checkpoint(dir + "/run.ckpt").params, ck.params);
    // A file of that name already there is not replaced: the next save takes another name.
    setenv("TMPDIR", dir.c_str(), 1);
    const std::string second = keep_elsewhere(opt, ck);
    if (old_tmpdir) setenv("TMPDIR", saved_tmpdir.c_str(), 1);
    else unsetenv("TMPDIR");
    EXPECT_NE(second.find("kept in " + dir + "/run.ckpt.1 instead"), std::string::npos) << second;
}

TEST(Checkpoint, RefusesToSaveNonFiniteValues) {
    const std::string path = temp_dir() + "/nan.ckpt";
    Checkpoint ck = random_checkpoint(config_by_name("micro"));
    ck.v[12] = std::numeric_limits<float>::infinity();
    expect_error_mentions([&] { save_checkpoint(path, ck); }, "AdamW moment v 12 of wte is inf");
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// SIGINT or SIGTERM during a save: the save stops, removes its temporary file, and the
// checkpoint saved before is still there, whole.
TEST(Checkpoint, InterruptedSaveKeepsThePreviousOne) {
    const std::string path = temp_dir() + "/interrupted.ckpt";
    const Checkpoint first = random_checkpoint(config_by_name("micro"));
    for (const auto& [sig, name] : {std::pair{SIGINT, "SIGINT"}, std::pair{SIGTERM, "SIGTERM"}}) {
        SCOPED_TRACE(name);
        save_checkpoint(path, first);
        Checkpoint second = first;
        second.step = 18;
        int chunks = 0;
        checkpoint_save_progress_hook() = [&, sig = sig] {
            if (++chunks == 1) std::raise(sig);  // after the first chunk
        };
        expect_error_mentions([&] { save_checkpoint(path, second); },
                              std::string("interrupted (") + name + ")");
        checkpoint_save_progress_hook() = nullptr;
        EXPECT_FALSE(fs::exists(path + ".tmp"));
        const Checkpoint back = load_checkpoint(path);
        EXPECT_EQ(back.step, first.step);
        EXPECT_EQ(back.params, first.params);
        // The handlers are put back: the signal is not ignored after the save.
        struct sigaction now = {};
        sigaction(sig, nullptr, &now);
        EXPECT_EQ(now.sa_handler, SIG_DFL);
    }
}


TEST_F(CorruptCheckpoint, Truncated) {
    fs::resize_file(path_, fs::file_size(path_) - 100);
    expect_error_mentions([&] { load_checkpoint(path_); }, "truncated");
}

TEST_F(CorruptCheckpoint, FlippedPayloadByte) {
    // Every bit of one byte flipped: writing a fixed value instead failed one run in 256, when the
    // random parameter already held it.
    const std::streamoff at = 1024 + 4 * 12345 + 2;
    char byte = 0;
    {
        std::ifstream f(path_, std::ios::binary);
        f.seekg(at);
        f.read(&byte, 1);
        ASSERT_TRUE(f.good()) << path_;
    }
    byte = static_cast<char>(~byte);
    poke(at, &byte, 1);
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

// --- gradient accumulation -----------------------------------------------------------------

// k micro-batches of B / k sequences, their gradients accumulated, give the update of one batch
// of B (testing/reference_run.h): fp32, so up to the order of the additions.
TEST(GradientAccumulation, MicroBatchesGiveTheUpdateOfOneBatch) {
    constexpr double kFp32Rel = 1e-5;
    for (const int k : {2, 4}) {
        SCOPED_TRACE("k = " + std::to_string(k));
        const test::AccumulationRun r = test::whole_and_accumulated<CpuReference>(k);
        EXPECT_TRUE(test::curves_close("loss", {r.accumulated.result.loss}, {r.whole.result.loss}, kFp32Rel));
        EXPECT_TRUE(test::curves_close("gradient norm", {r.accumulated.result.grad_norm},
                                       {r.whole.result.grad_norm}, kFp32Rel));
        EXPECT_TRUE(test::rel_l2_close("gradients", r.accumulated.grads, r.whole.grads, kFp32Rel));
        const test::ReferenceCase c = test::overfit_case();
        std::vector<float> step_whole(c.params.size()), step_accumulated(c.params.size());
        for (size_t i = 0; i < c.params.size(); ++i) {
            step_whole[i] = r.whole.params[i] - c.params[i];
            step_accumulated[i] = r.accumulated.params[i] - c.params[i];
        }
        EXPECT_TRUE(test::rel_l2_close("update", step_accumulated, step_whole, kFp32Rel));
    }
}

namespace {

// A corpus of random tokens, train and val shards, for runs of the trainer itself.
std::string small_corpus() {
    const std::string dir = temp_dir() + "/corpus";
    fs::create_directories(dir);
    Rng rng(1234);
    write_shard(dir + "/t_train_000000.bin", test::random_tokens(rng, 4096, 512));
    write_shard(dir + "/t_val_000000.bin", test::random_tokens(rng, 1024, 512));
    return dir;
}

// The losses a CPU training run logs, one per step.
std::vector<double> logged_losses(const std::string& jsonl) {
    std::vector<double> losses;
    std::ifstream in(jsonl);
    for (std::string line; std::getline(in, line);) {
        const Json event = Json::parse(line);
        if (event["type"].string == "step") losses.push_back(event["loss"].number);
    }
    return losses;
}

TrainOptions small_run(const std::string& corpus, const std::string& log) {
    TrainOptions o = default_options(false);
    o.model = "micro";
    o.data_dir = corpus;
    o.steps = 4;
    o.warmup = 1;
    o.val_every = 0;
    o.sample_every = 0;
    o.log = log;
    return o;
}

}  // namespace

// The trainer with --total-batch: 4 micro-batches of 2 x 16 tokens per step train exactly like
// batches of 8 x 16 (the data loader gives the same tokens in the same order).
TEST(GradientAccumulation, TotalBatchTrainsLikeOneLargeBatch) {
    const std::string corpus = small_corpus();
    TrainOptions large = small_run(corpus, temp_dir() + "/large.jsonl");
    large.batch = 8;
    large.seq = 16;
    TrainOptions accumulated = small_run(corpus, temp_dir() + "/accumulated.jsonl");
    accumulated.batch = 2;
    accumulated.seq = 16;
    accumulated.total_batch = 8 * 16;
    ASSERT_EQ(train<CpuReference>(large), 0);
    ASSERT_EQ(train<CpuReference>(accumulated), 0);
    const std::vector<double> a = logged_losses(accumulated.log), b = logged_losses(large.log);
    ASSERT_EQ(b.size(), 4u);
    EXPECT_TRUE(test::curves_close("losses with --total-batch vs one large batch", a, b, 1e-5));
}

TEST(GradientAccumulation, TotalBatchMustBeAMultipleOfTheMicroBatch) {
    TrainOptions o = small_run(small_corpus(), "");
    o.batch = 2;
    o.seq = 16;
    o.total_batch = 100;
    expect_error_mentions([&] { train<CpuReference>(o); }, "--total-batch 100 is not a multiple");
}

// --- the policy ----------------------------------------------------------------------------

TEST(Policy, RepoPathsResolveIncludesAndBuildCopies) {
    EXPECT_EQ(repo_path("/src/stages/02_bf16_autocast/../01_tf32/../00_fp32_baseline/matmul.cuh"),
              "stages/00_fp32_baseline/matmul.cuh");
    EXPECT_EQ(repo_path("/src/build/stage00-workshop/workshop/stages/00_fp32_baseline/./layernorm.cuh"),
              "stages/00_fp32_baseline/layernorm.cuh");
    EXPECT_EQ(repo_path("/home/common/repo/common/train/parallel.h"), "common/train/parallel.h");
    EXPECT_EQ(repo_path("elsewhere.h"), "elsewhere.h");
}

TEST(Policy, CpuReferenceTableNamesEveryOp) {
    const std::vector<OpRow> table = op_table<CpuReference>();
    ASSERT_EQ(table.size(), 14u);
    for (const OpRow& row : table) {
        SCOPED_TRACE(row.name);
        EXPECT_FALSE(row.where.empty());
        if (row.where.rfind("common/", 0) == 0)
            EXPECT_TRUE(fs::is_regular_file(fs::path(GPT_SOURCE_DIR) / row.where)) << row.where;
    }
    // The fusion slots the reference leaves unfused are composed from its own ops.
    EXPECT_EQ(table[7].name, "MatmulBiasGelu");
    EXPECT_EQ(table[7].where, "unfused: Matmul, then Gelu (common/train/compose.h)");
    EXPECT_EQ(table[8].name, "MatmulBackwardGelu");
    EXPECT_EQ(table[8].where, "unfused: Matmul backward, then Gelu backward (common/train/compose.h)");
}

// --- memory up front (train/memory.h) ---------------------------------------------------------

// Bytes the process holds from malloc and new right now (ASan has its own allocator).
size_t heap_bytes() {
#ifdef __SANITIZE_ADDRESS__
    return __sanitizer_get_current_allocated_bytes();
#else
    const struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#endif
}

// The trainer's refusal is only as good as the estimate: it must be what the model allocates,
// for one process and for each process of several, with and without ZeRO-1 (whose shards of the
// optimizer state do not come out even here: the last one is short).
template <class S>
void expect_estimate_is_allocation(const char* model, int B, int T, int micro_batches) {
    SCOPED_TRACE(testing::Message() << model << ", " << B << " x " << T << " x " << micro_batches << ", "
                                    << typename S::Parallel().describe() << ", ZeRO-1 "
                                    << typename S::Parallel().shards_optimizer());
    const GPTConfig config = config_by_name(model);
    typename S::Parallel parallel;
    const auto need = GPT<S>::memory_needed(config, B, T, micro_batches, &parallel);
    const size_t before = heap_bytes();
    size_t allocated = 0;
    {
        GPT<S> trained(config, B, T, micro_batches, &parallel);
        allocated = heap_bytes() - before;
    }
    const double estimate = double(need.buffers) + double(need.host);
    EXPECT_NEAR(estimate / double(allocated), 1.0, 0.02) << "estimate " << estimate << " bytes, allocated "
                                                          << allocated;
}

// The loss in chunks of rows (S::kLossChunkRows, stage 04 on; common/train/model_graph.h): the
// LM head's matmuls and the classifier run a chunk of rows at a time, and only one chunk's
// logits (at least a sequence's) are kept. The CPU reference chunked at 5 rows (fewer than a
// sequence) and at 48 (more), neither of which divides the case's 128 positions, must train as
// the whole: the same losses, validation loss, gradients and update, one micro-batch or two.
template <int kRows>
struct ChunkedCpuReference : CpuReference {
    static constexpr int kLossChunkRows = kRows;
};

template <class Chunked>
void expect_chunks_train_as_the_whole() {
    constexpr double kFp32Rel = 1e-5;
    const test::ReferenceCase c = test::overfit_case();
    const test::Step0 whole = test::reference_step0<CpuReference>(), chunked = test::reference_step0<Chunked>();
    EXPECT_TRUE(test::curves_close("step-0 loss", {chunked.loss}, {whole.loss}, kFp32Rel));
    EXPECT_TRUE(test::rel_l2_close("step-0 gradients", chunked.grads, whole.grads, kFp32Rel));
    {
        GPT<Chunked> model(c.config, c.B, c.T);
        model.set_parameters(c.params);
        model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
        model.evaluate();
        EXPECT_TRUE(test::curves_close("validation loss", {model.sync().loss}, {whole.loss}, kFp32Rel));
    }
    const test::AccumulationRun a = test::whole_and_accumulated<Chunked>(2);
    const test::AccumulationRun b = test::whole_and_accumulated<CpuReference>(2);
    EXPECT_TRUE(test::curves_close("loss of two micro-batches", {a.accumulated.result.loss},
                                   {b.accumulated.result.loss}, kFp32Rel));
    EXPECT_TRUE(test::rel_l2_close("gradients of two micro-batches", a.accumulated.grads, b.accumulated.grads,
                                   kFp32Rel));
    EXPECT_TRUE(test::rel_l2_close("parameters after a step", a.whole.params, b.whole.params, kFp32Rel));
}

TEST(LossInChunks, TrainsAsTheWhole) {
    {
        SCOPED_TRACE("chunks of 5 rows");
        expect_chunks_train_as_the_whole<ChunkedCpuReference<5>>();
    }
    {
        SCOPED_TRACE("chunks of 48 rows");
        expect_chunks_train_as_the_whole<ChunkedCpuReference<48>>();
    }
}

// Only one chunk's logits are allocated (but a sequence's at least: text generation reads
// them), the estimate says so, and what needs more says so in one line.
TEST(LossInChunks, KeepsOneChunksLogits) {
    using Chunked = ChunkedCpuReference<5>;
    const test::ReferenceCase c = test::overfit_case();
    const size_t Vp = size_t(c.config.padded_vocab(1)), N = size_t(c.B) * c.T;
    const auto whole = GPT<CpuReference>::memory_needed(c.config, c.B, c.T);
    const auto chunked = GPT<Chunked>::memory_needed(c.config, c.B, c.T);
    EXPECT_EQ(whole.buffers - chunked.buffers, (N - size_t(c.T)) * Vp * sizeof(float));

    GPT<Chunked> model(c.config, c.B, c.T);
    GPT<CpuReference> reference(c.config, c.B, c.T);
    model.set_parameters(c.params);
    reference.set_parameters(c.params);
    model.forward(c.tokens.data(), nullptr, 1, c.T);  // a sequence: its logits are all kept
    reference.forward(c.tokens.data(), nullptr, 1, c.T);
    EXPECT_TRUE(test::rel_l2_close("logits of the last position", model.logits_at(0, c.T - 1),
                                   reference.logits_at(0, c.T - 1), 1e-6));
    EXPECT_EQ(error_of([&] { model.forward(c.tokens.data(), nullptr, 2, c.T); }),
              "this stage keeps the logits of 32 positions at a time (its loss works in chunks); a forward "
              "without targets of 2 x 32 positions needs them all");
    model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);  // training: no logits kept
    EXPECT_EQ(error_of([&] { model.logits_at(0, 0); }),
              "logits_at: the last forward kept no logits (stage cpu_reference computes them a chunk at a time in "
              "the loss); run a forward without targets");
}

TEST(Memory, EstimateIsWhatTheCpuModelAllocates) {
    using One = test::AsProcess<CpuReference, 0, 1, 0>;
    expect_estimate_is_allocation<One>("tiny", 8, 64, 1);
    expect_estimate_is_allocation<One>("tiny", 3, 127, 4);
    expect_estimate_is_allocation<One>("d12", 1, 64, 1);
    expect_estimate_is_allocation<test::AsProcess<CpuReference, 1, 2, 0>>("tiny", 3, 127, 2);
    expect_estimate_is_allocation<test::AsProcess<CpuReference, 1, 2, 1>>("tiny", 3, 127, 2);  // --zero 1, 2 processes
    expect_estimate_is_allocation<test::AsProcess<CpuReference, 0, 3, 1>>("tiny", 3, 127, 2);
    expect_estimate_is_allocation<test::AsProcess<CpuReference, 2, 3, 1>>("tiny", 3, 127, 2);
    expect_estimate_is_allocation<test::AsProcess<CpuReference, 1, 4, 1>>("d12", 1, 64, 1);  // --zero 1, 4 processes
    expect_estimate_is_allocation<test::AsProcess<ChunkedCpuReference<5>, 0, 1, 0>>("tiny", 3, 127, 4);
}

// The trainer's own check (train/memory.h) asks for the process's share: with ZeRO-1 over 5
// processes, each keeps a fifth of AdamW's moments, and its gradients and master weights are
// padded to 5 whole shards (124,439,808 parameters are not a multiple of 5).
TEST(Memory, ZeroOneEstimatesTheShardOfTheMoments) {
    const GPTConfig config = config_by_name("d12");
    const long long P = static_cast<long long>(ParamLayout(config).total());
    const long long stride = (P + 4) / 5, padded = 5 * stride;
    ASSERT_GT(padded, P);
    test::PlaceInGroup<1, 5, 0> replicated;
    test::PlaceInGroup<1, 5, 1> sharded;
    const auto whole = GPT<test::AsProcess<CpuReference, 1, 5, 0>>::memory_needed(config, 1, 64, 1, &replicated);
    const auto shard = GPT<test::AsProcess<CpuReference, 1, 5, 1>>::memory_needed(config, 1, 64, 1, &sharded);
    EXPECT_EQ(static_cast<long long>(whole.buffers) - static_cast<long long>(shard.buffers),
              static_cast<long long>(sizeof(float)) * (2 * (P - stride) - 2 * (padded - P)));
    EXPECT_EQ(whole.host, shard.host);
}

TEST(Memory, RefusalNamesEstimateAvailableAndLargestBatch) {
    constexpr size_t GiB = size_t(1) << 30;
    const MemoryNeed one{0, 11 * GiB}, two{0, 12 * GiB};  // 10 GiB, and 1 GiB per sequence
    EXPECT_NO_THROW(require_memory(one, two, 10, MemoryNeed{0, 20 * GiB}, "run"));
    std::string message;
    try {
        require_memory(one, two, 4096, MemoryNeed{0, 20 * GiB}, "--batch 4096");
    } catch (const Error& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("--batch 4096 needs about 4106.0 GiB of host memory"), std::string::npos) << message;
    EXPECT_NE(message.find("but 20.0 GiB is available; the largest --batch that fits is 10"), std::string::npos)
        << message;
    EXPECT_THROW(require_memory(one, two, 1, MemoryNeed{0, 10 * GiB}, "run"), Error);
    try {
        require_memory(one, two, 1, MemoryNeed{0, 10 * GiB}, "run");
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not even --batch 1 fits"), std::string::npos) << e.what();
    }
    // Device memory is judged on its own; the host's may have room to spare.
    try {
        require_memory(MemoryNeed{3 * GiB, GiB}, MemoryNeed{5 * GiB, GiB}, 8, MemoryNeed{8 * GiB, 100 * GiB}, "run");
        ADD_FAILURE() << "17 GiB fitted in 8";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("needs about 17.0 GiB of device memory"), std::string::npos) << m;
        EXPECT_NE(m.find("but 8.0 GiB is available; the largest --batch that fits is 3"), std::string::npos) << m;
    }
}

TEST(Memory, HostMemoryIsKnownOnLinux) {
    const size_t available = available_host_memory();
    EXPECT_GT(available, size_t(1) << 20);
    EXPECT_LT(available, size_t(1) << 50) << "neither /proc/meminfo nor a cgroup limit was read";
}

namespace {

// GPT_MEMORY_LIMIT set for one scope (unset: nullptr), and restored after it.
class MemoryLimit {
public:
    explicit MemoryLimit(const char* value) {
        if (const char* old = std::getenv("GPT_MEMORY_LIMIT")) saved_ = old, had_ = true;
        if (value) setenv("GPT_MEMORY_LIMIT", value, 1);
        else unsetenv("GPT_MEMORY_LIMIT");
    }
    ~MemoryLimit() {
        if (had_) setenv("GPT_MEMORY_LIMIT", saved_.c_str(), 1);
        else unsetenv("GPT_MEMORY_LIMIT");
    }

private:
    std::string saved_;
    bool had_ = false;
};

}  // namespace

TEST(Memory, LimitFromTheEnvironmentIsASize) {
    const auto limit = [](const char* value) {
        MemoryLimit set(value);
        return memory_limit_from_environment();
    };
    EXPECT_EQ(limit(nullptr), 0u);
    EXPECT_EQ(limit(""), 0u);
    EXPECT_EQ(limit("1000"), 1000u);
    EXPECT_EQ(limit("512M"), size_t(512) << 20);
    EXPECT_EQ(limit("1.5G"), size_t(3) << 29);
    EXPECT_EQ(limit("2T"), size_t(2) << 40);
    EXPECT_EQ(limit("4k"), 4096u);
    for (const char* bad : {"abc", "-1", "0", "0.1", "12X", "G", " 5G", "5 G", "1e400", "nan", "inf"}) {
        MemoryLimit set(bad);
        EXPECT_EQ(error_of([] { memory_limit_from_environment(); }),
                  "GPT_MEMORY_LIMIT='" + std::string(bad) +
                      "' is not a size: give bytes, or a number with K, M, G or T (powers of 1024), such as 512M or "
                      "15.5G")
            << bad;
    }
    // It lowers the model's kind of memory only: the GPU's on a GPU, the host's on the CPU.
    MemoryLimit set("1M");
    const MemoryNeed gpu = available_memory(size_t(8) << 30, true), cpu = available_memory(size_t(8) << 30, false);
    EXPECT_EQ(gpu.device, size_t(1) << 20);
    EXPECT_GT(gpu.host, size_t(1) << 20);  // not lowered (the machine's own figure moves while others run)
    EXPECT_EQ(cpu.device, size_t(8) << 30);
    EXPECT_EQ(cpu.host, size_t(1) << 20);
}

// A default batch that does not fit becomes the fewest micro-batches that do, each a divisor of
// the batch; the refusal of a batch the limit set says so.
TEST(Memory, DefaultBatchSplitsIntoTheFewestMicroBatchesThatFit) {
    using One = test::AsProcess<CpuReference, 0, 1, 0>;
    const GPTConfig config = config_by_name("tiny");
    const int T = 64;
    // The host memory of B x T micro-batches, k of them.
    const auto need = [&](int B, int k) {
        const auto [one, two] = memory_per_batch<One>(config, T, k, nullptr);
        return one.host + (two.host - one.host) * size_t(B - 1);
    };
    const auto split = [&](size_t limit, int B, int micro_batches) {
        MemoryLimit set(std::to_string(limit).c_str());
        return fewest_micro_batches_that_fit<One>(config, B, T, micro_batches);
    };
    {
        MemoryLimit none(nullptr);
        EXPECT_EQ(fewest_micro_batches_that_fit<One>(config, 12, T, 1), 1);
    }
    EXPECT_EQ(split(need(12, 1), 12, 1), 1);
    EXPECT_EQ(split(need(12, 1) - 1, 12, 1), 2);  // 6 x 2
    EXPECT_EQ(split(need(6, 2) - 1, 12, 1), 3);   // 4 x 3
    EXPECT_EQ(split(need(4, 3) - 1, 12, 1), 4);   // 3 x 4, never 5 (not a divisor of 12)
    EXPECT_EQ(split(need(2, 6), 12, 1), 6);
    EXPECT_EQ(split(need(1, 12), 12, 1), 12);
    EXPECT_EQ(split(need(1, 12) - 1, 12, 1), 0);  // not even one sequence
    // With micro-batches already (--total-batch), each is split alike: 3 of 4 become 6 of 2.
    EXPECT_EQ(split(need(4, 3) - 1, 4, 3), 2);
    EXPECT_EQ(split(need(2, 6), 4, 3), 2);
    // The batch of a 7-sequence default: 7 x 1 or 1 x 7, nothing between.
    EXPECT_EQ(split(need(7, 1) - 1, 7, 1), 7);

    MemoryLimit set(std::to_string(need(12, 1) - 1).c_str());
    const std::string refusal = error_of([&] { check_memory<One>(config, 12, T, 1); });
    EXPECT_NE(refusal.find("is available (GPT_MEMORY_LIMIT); the largest --batch that fits is 11"), std::string::npos)
        << refusal;
    EXPECT_NE(refusal.find(" MiB of host memory"), std::string::npos) << refusal;  // below a GiB, in MiB
}

// ---- llm.c model files (docs/formats.md, "llm.c model files") ------------------------------

namespace {

// Sizes that are no tile multiple: C = 12 with 3 heads, V = 1000, maxT = 5.
const GPTConfig kOddConfig{5, 1000, 2, 3, 12};

float float_of_bits(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
}

uint32_t bits_of(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits;
}

// Where element i of tensor t lies in an llm.c file with Vp rows of wte and elements of `bytes`.
std::streamoff llmc_offset(const GPTConfig& c, int padded_vocab, int t, size_t i, size_t bytes) {
    return static_cast<std::streamoff>(1024 + bytes * (ParamLayout(c, padded_vocab).offset[t] + i));
}

std::vector<float> random_params(const GPTConfig& c) {
    Rng rng(test::test_seed());
    return test::random_normal(rng, ParamLayout(c).total(), 0.5f, 0.1f);
}

}  // namespace

// Our parameters -> llm.c v3 -> our parameters is the identity, bit for bit; the file holds our
// tensors in our order with Vp rows of wte, the padded ones zero.
TEST(Llmc, Fp32RoundTripIsBitIdentical) {
    const GPTConfig c = kOddConfig;
    const std::vector<float> params = random_params(c);
    const ParamLayout layout(c);
    for (const int vp : {1024, 1000, 1003}) {  // a multiple of 128, Vp == V, V + 3
        SCOPED_TRACE("Vp " + std::to_string(vp));
        const std::string path = temp_dir() + "/v3_" + std::to_string(vp) + ".bin";
        save_llmc_model(path, c, params, vp);
        EXPECT_FALSE(fs::exists(path + ".tmp"));

        // The file itself, read here without the reader.
        const std::string bytes = read_regular_file(path, "");
        const size_t file_count = ParamLayout(c, vp).total();
        ASSERT_EQ(bytes.size(), 1024 + 4 * file_count);
        std::vector<int32_t> header(256);
        std::memcpy(header.data(), bytes.data(), 1024);
        const std::vector<int32_t> expected_words = {20240326, 3, 5, 1000, 2, 3, 12, vp};
        for (int w = 0; w < 256; ++w) EXPECT_EQ(header[w], w < 8 ? expected_words[w] : 0) << "header word " << w;
        std::vector<float> payload(file_count);
        std::memcpy(payload.data(), bytes.data() + 1024, 4 * file_count);
        const size_t wte = layout.size[kWte], padding = size_t(vp - c.vocab_size) * c.n_embd;
        EXPECT_EQ(std::memcmp(payload.data(), params.data(), 4 * wte), 0) << "wte";
        for (size_t i = 0; i < padding; ++i) ASSERT_EQ(bits_of(payload[wte + i]), 0u) << "padded element " << i;
        EXPECT_EQ(std::memcmp(payload.data() + wte + padding, params.data() + wte, 4 * (params.size() - wte)), 0)
            << "the tensors after wte";

        LlmcFormat format;
        const Checkpoint back = load_llmc_model(path, &format);
        EXPECT_TRUE(back.config == c);
        EXPECT_EQ(format.version, 3);
        EXPECT_EQ(format.padded_vocab, vp);
        EXPECT_EQ(back.step, 0);
        EXPECT_TRUE(back.m.empty() && back.v.empty());
        EXPECT_FALSE(back.run.recorded);
        ASSERT_EQ(back.params.size(), params.size());
        EXPECT_EQ(std::memcmp(back.params.data(), params.data(), 4 * params.size()), 0);
    }
}

// bf16 is the upper half of an fp32, rounded to nearest, ties to even.
TEST(Llmc, Bf16RoundsToNearestEven) {
    const GPTConfig c = kOddConfig;
    std::vector<float> params = random_params(c);
    const ParamLayout layout(c);
    // {input bits, expected bf16 bits}, worked out by hand.
    const std::pair<uint32_t, uint32_t> cases[] = {
        {0x3F800000u, 0x3F80u},  // 1: exact
        {0x3F808000u, 0x3F80u},  // 1 + 2^-8, half-way between 1 (even) and 1 + 2^-7: down to even
        {0x3F818000u, 0x3F82u},  // half-way between 0x3F81 (odd) and 0x3F82: up to even
        {0x3F808001u, 0x3F81u},  // just above half-way: up
        {0x3F807FFFu, 0x3F80u},  // just below half-way: down
        {0xBF818000u, 0xBF82u},  // the same for a negative value
        {0x3EAAAAABu, 0x3EABu},  // 1/3: 0x3EAA + 0xAAAB/0x10000 of an ulp, above half: up
        {0x7F7F0000u, 0x7F7Fu},  // the largest bf16
        {0x3F7FFFFFu, 0x3F80u},  // just below 1: the carry reaches the exponent
    };
    const int targets[] = {kWte, kWpe, kQkvW, kLnfB};  // first tensor, after the padding, a middle one, the last
    size_t k = 0;
    std::vector<size_t> where;
    for (const auto& [in, out] : cases) {
        const int t = targets[k % 4];
        const size_t i = layout.offset[t] + (k / 4) * 3 + (t == kLnfB ? 0 : 1);
        params[i] = float_of_bits(in);
        where.push_back(i);
        ++k;
    }
    const std::string path = temp_dir() + "/v5.bin";
    save_llmc_model(path, c, params, 1024, kLlmcVersionBf16);
    EXPECT_EQ(fs::file_size(path), 1024 + 2 * ParamLayout(c, 1024).total());
    LlmcFormat format;
    const std::vector<float> back = load_llmc_model(path, &format).params;
    EXPECT_EQ(format.version, 5);
    ASSERT_EQ(back.size(), params.size());
    for (size_t j = 0; j < where.size(); ++j)
        EXPECT_EQ(bits_of(back[where[j]]), cases[j].second << 16)
            << std::hex << "input 0x" << cases[j].first << " at " << param_position(c, where[j]);
    // Every other value: a bf16 (low half zero) within half a bf16 ulp, 2^-8 of the value.
    for (size_t i = 0; i < params.size(); ++i) {
        const float err = std::fabs(back[i] - params[i]);
        if (!(err <= std::ldexp(std::fabs(params[i]), -8)) || (bits_of(back[i]) & 0xFFFFu) != 0)
            FAIL() << "element " << param_position(c, i) << ": " << params[i] << " read back as " << back[i];
    }
    // A bf16 file read and written again is the same file: rounding a bf16 value changes nothing.
    const std::string again = temp_dir() + "/v5_again.bin";
    save_llmc_model(again, c, back, 1024, kLlmcVersionBf16);
    EXPECT_EQ(read_regular_file(again, ""), read_regular_file(path, ""));
}

// llm.c's padded rows are zero, but they are not part of the model: whatever they hold, the
// reader returns V rows.
TEST(Llmc, PaddedRowsAreSkippedWhateverTheyHold) {
    const GPTConfig c = kOddConfig;
    const int vp = 1003;
    for (const int version : {kLlmcVersionFp32, kLlmcVersionBf16}) {
        SCOPED_TRACE("version " + std::to_string(version));
        const size_t bytes = version == kLlmcVersionBf16 ? 2 : 4;
        const std::string path = temp_dir() + "/junk_" + std::to_string(version) + ".bin";
        save_llmc_model(path, c, random_params(c), vp, version);
        const std::vector<float> clean = load_llmc_model(path).params;
        Rng rng(test::test_seed() + 1);
        std::string junk(size_t(vp - c.vocab_size) * c.n_embd * bytes, '\0');
        for (char& b : junk) b = static_cast<char>(rng.below(256));
        junk[0] = junk[1] = static_cast<char>(0xFF);  // a NaN in either width: never read as a parameter
        write_at(path, llmc_offset(c, vp, kWte, size_t(c.vocab_size) * c.n_embd, bytes), junk.data(), junk.size());
        const Checkpoint back = load_llmc_model(path);
        EXPECT_EQ(back.params.size(), ParamLayout(c).total());
        EXPECT_EQ(back.params, clean);
    }
}

TEST(Llmc, RefusesToSaveWhatItCouldNotReadBack) {
    const GPTConfig c = kOddConfig;
    const std::string path = temp_dir() + "/refused.bin";
    const std::string where = "not saving llm.c model file " + path + ": ";
    std::vector<float> params = random_params(c);
    EXPECT_EQ(error_of([&] { save_llmc_model(path, c, params, 999); }),
              where + "padded vocabulary Vp 999 is smaller than V 1000");
    EXPECT_EQ(error_of([&] { save_llmc_model(path, c, params, 1024, 4); }),
              where + "version 4 (3 = fp32 or 5 = bf16 parameters)");
    EXPECT_EQ(error_of([&] { save_llmc_model(path, c, std::vector<float>(params.begin() + 1, params.end()), 1024); }),
              where + std::to_string(params.size() - 1) + " parameters, its config has " + std::to_string(params.size()));
    const ParamLayout layout(c);
    params[layout.offset[kWpe] + 3] = std::nanf("");
    EXPECT_EQ(error_of([&] { save_llmc_model(path, c, params, 1024); }), where + "parameter 3 of wpe is nan");
    params[layout.offset[kWpe] + 3] = 0.5f;
    params[layout.offset[kLnfW]] = 3.4e38f;  // finite in fp32, beyond the largest bf16 (3.3895e38)
    EXPECT_NO_THROW(save_llmc_model(path, c, params, 1024));
    fs::remove(path);
    EXPECT_EQ(error_of([&] { save_llmc_model(path, c, params, 1024, kLlmcVersionBf16); }),
              where + "parameter 0 of lnf_w is 3.4e+38, beyond the range of bf16");
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Every rule of the format, each broken on its own: one line naming the file and the rule.
class MalformedLlmc : public ::testing::Test {
  protected:
    void SetUp() override {
        path_ = temp_dir() + "/model.bin";
        save_llmc_model(path_, kOddConfig, random_params(kOddConfig), kVp);
        size_ = fs::file_size(path_);
    }
    void set_word(int word, int32_t value) { write_at(path_, 4 * word, &value, 4); }
    std::string error() { return error_of([&] { load_llmc_model(path_); }); }
    std::string sizes(uintmax_t expected_payload, uintmax_t found) {
        return "1024 + " + std::to_string(expected_payload) + " bytes expected, " + std::to_string(found) + " found";
    }
    static constexpr int kVp = 1024;
    std::string path_;
    uintmax_t size_ = 0;
};

TEST_F(MalformedLlmc, NotAnLlmcFile) {
    set_word(0, 123);
    EXPECT_EQ(error(), path_ + ": not an llm.c model file (magic 123, expected 20240326)");
    set_word(0, kCheckpointMagic);  // a checkpoint is not an llm.c file either
    EXPECT_EQ(error(), path_ + ": not an llm.c model file (magic 20261122, expected 20240326)");
}

TEST_F(MalformedLlmc, UnknownVersion) {
    for (const int version : {0, 1, 2, 4, 6, -3}) {
        set_word(1, version);
        EXPECT_EQ(error(), path_ + ": llm.c model file of version " + std::to_string(version) +
                               " (expected 3 = fp32 or 5 = bf16 parameters)");
    }
}

TEST_F(MalformedLlmc, VersionDoesNotMatchTheSize) {
    const uintmax_t payload = size_ - 1024;  // fp32
    set_word(1, 5);
    EXPECT_EQ(error(), path_ + ": version 5 (bf16 parameters), but its size is that of fp32 parameters: " +
                           sizes(payload / 2, size_));
    save_llmc_model(path_, kOddConfig, random_params(kOddConfig), kVp, kLlmcVersionBf16);
    set_word(1, 3);
    EXPECT_EQ(error(), path_ + ": version 3 (fp32 parameters), but its size is that of bf16 parameters: " +
                           sizes(payload, 1024 + payload / 2));
}

TEST_F(MalformedLlmc, PaddedVocabularySmallerThanTheVocabulary) {
    set_word(7, 999);
    EXPECT_EQ(error(), path_ + ": padded vocabulary Vp 999 is smaller than V 1000");
    set_word(7, -1);
    EXPECT_EQ(error(), path_ + ": padded vocabulary Vp -1 is smaller than V 1000");
}

TEST_F(MalformedLlmc, InvalidConfig) {
    set_word(5, 5);  // 12 is not divisible by 5 heads
    EXPECT_EQ(error(), path_ + ": invalid model config (L=2 H=5 C=12 maxT=5 V=1000): C must be divisible by H");
    set_word(5, 3);
    set_word(4, 0);
    EXPECT_EQ(error(), path_ + ": invalid model config (L=0 H=3 C=12 maxT=5 V=1000): every size must be positive");
    set_word(4, 1 << 30);  // L * 12 C^2 would overflow 32 bits; refused before any count is made
    EXPECT_EQ(error(), path_ + ": invalid model config (L=1073741824 H=3 C=12 maxT=5 V=1000): larger than maxT "
                               "1048576, V 16777216, L 4096 or C 65536");
}

// The largest sizes the config allows make a file of hundreds of terabytes: its size is counted
// in 64 bits and compared with the file's, and nothing is allocated.
TEST_F(MalformedLlmc, HugeSizesAreTruncatedNotAllocated) {
    const GPTConfig huge{1 << 20, 1 << 24, 4096, 1, 1 << 16};
    for (const int vp : {1 << 24, std::numeric_limits<int32_t>::max()}) {
        set_word(2, huge.max_seq_len);
        set_word(3, huge.vocab_size);
        set_word(4, huge.n_layer);
        set_word(5, huge.n_head);
        set_word(6, huge.n_embd);
        set_word(7, vp);
        const uintmax_t payload = 4 * uintmax_t(ParamLayout(huge, vp).total());
        EXPECT_GT(payload, uintmax_t(1) << 49);
        EXPECT_EQ(error(), path_ + ": truncated: " + sizes(payload, size_));
    }
}

TEST_F(MalformedLlmc, NonZeroHeaderWord) {
    set_word(8, 50304);
    EXPECT_EQ(error(), path_ + ": header word 8 is 50304, not 0 (llm.c model files use words 0 to 7 only)");
    set_word(8, 0);
    set_word(255, -1);
    EXPECT_EQ(error(), path_ + ": header word 255 is -1, not 0 (llm.c model files use words 0 to 7 only)");
}

// Cut in every part: before the magic, in the header, in wte, in its padding, the last byte.
TEST_F(MalformedLlmc, TruncatedAnywhereOrTrailingBytes) {
    const uintmax_t payload = size_ - 1024;
    const GPTConfig& c = kOddConfig;
    for (const uintmax_t cut : {uintmax_t(0), uintmax_t(3)}) {
        fs::resize_file(path_, cut);
        EXPECT_EQ(error(), path_ + ": not an llm.c model file (" + std::to_string(cut) +
                               " bytes, shorter than its magic number)");
    }
    save_llmc_model(path_, c, random_params(c), kVp);
    for (const uintmax_t cut : {uintmax_t(4), uintmax_t(100), uintmax_t(1023)}) {
        fs::resize_file(path_, cut);
        EXPECT_EQ(error(), path_ + ": truncated: a header of 1024 bytes expected, " + std::to_string(cut) + " found");
    }
    save_llmc_model(path_, c, random_params(c), kVp);
    const uintmax_t cuts[] = {1024, uintmax_t(llmc_offset(c, kVp, kWte, 6001, 4)) + 2,
                              uintmax_t(llmc_offset(c, kVp, kWte, size_t(c.vocab_size) * c.n_embd + 5, 4)),
                              size_ - 1};
    for (const uintmax_t cut : cuts) {
        fs::resize_file(path_, cut);
        EXPECT_EQ(error(), path_ + ": truncated: " + sizes(payload, cut));
    }
    fs::resize_file(path_, size_ + 1);
    EXPECT_EQ(error(), path_ + ": trailing bytes: " + sizes(payload, size_ + 1));
}

TEST_F(MalformedLlmc, NonFiniteParameter) {
    const float nan = std::nanf("");
    write_at(path_, llmc_offset(kOddConfig, kVp, kQkvW, 5, 4), &nan, 4);
    EXPECT_EQ(error(), path_ + ": parameter 5 of qkv_w is nan");
    // bf16: the upper half of an fp32 infinity.
    save_llmc_model(path_, kOddConfig, random_params(kOddConfig), kVp, kLlmcVersionBf16);
    const uint16_t inf = 0xFF80u;
    write_at(path_, llmc_offset(kOddConfig, kVp, kLnfB, 11, 2), &inf, 2);
    EXPECT_EQ(error(), path_ + ": parameter 11 of lnf_b is inf");
}

TEST_F(MalformedLlmc, NotARegularFile) {
    const std::string dir = temp_dir() + "/a_directory.bin";
    fs::create_directories(dir);
    EXPECT_EQ(error_of([&] { load_llmc_model(dir); }), dir + ": is a directory, not a regular file");
    // A directory may be Hugging Face's (docs/formats.md): what it lacks is said.
    EXPECT_EQ(error_of([&] { load_model_file(dir); }),
              dir + ": a directory without model.safetensors (the Hugging Face layout; see docs/formats.md)");
    EXPECT_EQ(error_of([&] { load_model_file(temp_dir() + "/none.bin"); }), temp_dir() + "/none.bin: not found");
}

// --init takes any kind of model file (test_safetensors.cpp: the third); --resume only a checkpoint.
TEST(ModelFile, EitherKindByItsMagic) {
    const Checkpoint ck = random_checkpoint(kOddConfig);
    const std::string ckpt = temp_dir() + "/run.ckpt", llmc = temp_dir() + "/model.bin";
    save_checkpoint(ckpt, ck);
    save_llmc_model(llmc, ck.config, ck.params, 1024);
    EXPECT_EQ(model_file_kind(ckpt), ModelFileKind::kCheckpoint);
    EXPECT_EQ(model_file_kind(llmc), ModelFileKind::kLlmc);
    const Checkpoint from_ckpt = load_model_file(ckpt);
    EXPECT_EQ(from_ckpt.step, ck.step);
    EXPECT_EQ(from_ckpt.m, ck.m);  // the whole checkpoint, optimizer state included
    EXPECT_EQ(from_ckpt.params, ck.params);
    const Checkpoint from_llmc = load_model_file(llmc);
    EXPECT_TRUE(from_llmc.config == ck.config);
    EXPECT_EQ(from_llmc.params, ck.params);
    EXPECT_EQ(error_of([&] { load_checkpoint(llmc); }),
              "checkpoint " + llmc + ": an llm.c model file (magic 20240326), not a checkpoint of this project: it "
                                     "holds parameters only; start from it with --init");
}

TEST(ModelFile, NeitherKindIsOneLine) {
    const std::string path = temp_dir() + "/other.bin";
    const std::string neither = path + ": neither a checkpoint of this project (magic 20261122), an llm.c "
                                       "model file (magic 20240326) nor a safetensors file (a header length, then '{')";
    write_shard(path, {1, 2, 3});  // a token shard: magic 20240520
    EXPECT_EQ(error_of([&] { load_model_file(path); }), neither);
    for (const size_t size : {0, 1, 3}) {  // shorter than a magic number, even one that begins right
        const int32_t magic = kCheckpointMagic;
        std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(&magic), size);
        EXPECT_EQ(error_of([&] { load_model_file(path); }), neither) << size << " bytes";
    }
}
