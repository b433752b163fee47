// The padded vocabulary (stage 05) on the CPU reference: the model graph, the optimizer and the
// checkpoints handle Vp > V so that padding changes nothing but the memory layout. The GPU
// stages are held to the same by tests/gpu/stage_tests.cuh (Model.PaddedRowsStayZero,
// Model.PaddingChangesNothing); these run everywhere, CI included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/reference_stage.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/reference_case.h"
#include "testing/reference_run.h"
#include "testing/tolerance.h"
#include "train/sampler.h"
#include "train/gpt.h"
#include "util/rng.h"

namespace {

// The CPU reference with stage 05's padding: 50257 -> 50304.
struct PaddedCpuReference : gpt::CpuReference {
    static constexpr int kVocabMultiple = 128;
};

struct TrainRun {
    std::vector<float> losses, grad_norms, params;
};

// The reference case's batch for `steps` steps, with weight decay (which would move any padded
// weight that were not zero).
template <class S>
TrainRun train(gpt::GPT<S>& model, int steps) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    model.set_parameters(c.params);
    gpt::AdamWSettings adamw;
    adamw.weight_decay = 0.1f;
    const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
    TrainRun r;
    for (int t = 1; t <= steps; ++t) {
        const gpt::StepResult s = model.train_step(batch, c.B, c.T, 1.0f / float(c.B * c.T), adamw, 1e-2f, t);
        r.losses.push_back(s.loss);
        r.grad_norms.push_back(s.grad_norm);
    }
    r.params = model.parameters();
    return r;
}

std::vector<double> doubles(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(Padding, PaddedModelHasTheLayoutOfStage05) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<PaddedCpuReference> model(c.config, c.B, c.T);
    EXPECT_EQ(c.config.vocab_size, 50257);
    EXPECT_EQ(model.padded_vocab(), 50304);
    EXPECT_EQ(model.layout().size[gpt::kWte], size_t(50304) * c.config.n_embd);
    // The file layout is what leaves the model: V rows.
    model.set_parameters(c.params);
    EXPECT_EQ(model.parameters().size(), c.params.size());
}

// Ten steps of the padded and the unpadded CPU reference: the same losses, gradient norms and
// weights. The padded columns add only zeros, but the CPU matmuls' vectorised sums over the
// vocabulary group their terms by position, so 47 more columns change the order of additions:
// equal within the fp32 model tolerance, not bit for bit.
TEST(Padding, PaddedCpuReferenceTrainsLikeTheUnpadded) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<gpt::CpuReference> plain(c.config, c.B, c.T);
    gpt::GPT<PaddedCpuReference> padded(c.config, c.B, c.T);
    const TrainRun a = train(plain, 10), b = train(padded, 10);
    const double tol = gpt::test::model_rel_l2(gpt::Precision::FP32);
    EXPECT_TRUE(gpt::test::curves_close("losses", doubles(b.losses), doubles(a.losses), tol));
    EXPECT_TRUE(gpt::test::curves_close("gradient norms", doubles(b.grad_norms), doubles(a.grad_norms), tol));
    EXPECT_TRUE(gpt::test::rel_l2_close("parameters after 10 steps", b.params, a.params, tol));
    EXPECT_LT(a.losses.back(), 0.5f * a.losses.front()) << "the case should overfit its batch";
}

// The padded rows of wte start at zero, get no gradient, and stay exactly zero in the weights,
// the gradients and both moments, weight decay or not.
TEST(Padding, PaddedRowsStayZero) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<PaddedCpuReference> model(c.config, c.B, c.T);
    train(model, 10);
    const std::vector<float> padding = model.padded_rows();
    ASSERT_EQ(padding.size(), 5 * size_t(50304 - 50257) * c.config.n_embd);
    size_t nonzero = 0;
    for (const float x : padding)
        if (x != 0.0f) ++nonzero;  // NaN too
    EXPECT_EQ(nonzero, 0u);
}

// Sampling reads the V real logits only. The weights are made so that the padded logits (0)
// would win every draw if they were read: ln_f outputs its bias, all ones, at every position, and
// every real row of wte is -0.3, so every real logit is -0.3 · C.
TEST(Padding, SamplingNeverProducesAPaddedId) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    const gpt::ParamLayout layout(c.config);
    std::vector<float> params = c.params;
    auto tensor = [&](int t) { return params.begin() + layout.offset[t]; };
    std::fill(tensor(gpt::kWte), tensor(gpt::kWte) + layout.size[gpt::kWte], -0.3f);
    std::fill(tensor(gpt::kLnfW), tensor(gpt::kLnfW) + layout.size[gpt::kLnfW], 0.0f);
    std::fill(tensor(gpt::kLnfB), tensor(gpt::kLnfB) + layout.size[gpt::kLnfB], 1.0f);
    gpt::GPT<PaddedCpuReference> model(c.config, 1, 8);
    model.set_parameters(params);
    const int tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    model.forward(tokens, nullptr, 1, 8);
    const std::vector<float> logits = model.logits_at(0, 7);
    ASSERT_EQ(logits.size(), size_t(c.config.vocab_size));
    EXPECT_FLOAT_EQ(logits[0], -0.3f * c.config.n_embd);
    gpt::Rng rng(7);
    const std::string ids = gpt::generate(model, nullptr, 8, 1.0f, 0, rng);
    std::istringstream in(ids);
    int id = 0, count = 0;
    while (in >> id) {
        ++count;
        EXPECT_LT(id, c.config.vocab_size) << "sampled ids: " << ids;
    }
    EXPECT_GT(count, 0) << "nothing sampled";
}

// A checkpoint keeps V rows whatever the trainer's padding, so that one written by a padded stage
// loads into an unpadded one and the other way round, optimizer state included.
TEST(Padding, CheckpointsMoveBetweenPaddings) {
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    const std::string dir = gpt::test::scratch_dir("padding");
    gpt::GPT<PaddedCpuReference> padded(c.config, c.B, c.T);
    train(padded, 3);
    gpt::Checkpoint written;
    written.config = c.config;
    written.step = 3;
    written.params = padded.parameters();
    written.m = padded.optimizer_m();
    written.v = padded.optimizer_v();
    const std::string path = dir + "/padded.ckpt";
    gpt::save_checkpoint(path, written);

    const gpt::Checkpoint read = gpt::load_checkpoint(path);
    ASSERT_EQ(read.params.size(), gpt::ParamLayout(c.config).total()) << "files hold V rows of wte";
    gpt::GPT<gpt::CpuReference> plain(c.config, c.B, c.T);
    plain.set_parameters(read.params);
    plain.set_optimizer_state(read.m, read.v);
    EXPECT_EQ(plain.parameters(), written.params);
    EXPECT_EQ(plain.optimizer_m(), written.m);
    EXPECT_EQ(plain.optimizer_v(), written.v);

    // And back into a padded model: the padded rows come back as zeros.
    gpt::GPT<PaddedCpuReference> again(c.config, c.B, c.T);
    again.set_parameters(plain.parameters());
    again.set_optimizer_state(plain.optimizer_m(), plain.optimizer_v());
    EXPECT_EQ(again.parameters(), written.params);
    for (const float x : again.padded_rows()) ASSERT_EQ(x, 0.0f);

    // The next step from the checkpoint is the same step in both.
    const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
    const gpt::AdamWSettings adamw;
    const float loss_scale = 1.0f / float(c.B * c.T);
    const gpt::StepResult p = plain.train_step(batch, c.B, c.T, loss_scale, adamw, 1e-3f, 4);
    const gpt::StepResult q = again.train_step(batch, c.B, c.T, loss_scale, adamw, 1e-3f, 4);
    EXPECT_TRUE(gpt::test::curves_close("loss of the step after the checkpoint", {q.loss}, {p.loss},
                                        gpt::test::model_rel_l2(gpt::Precision::FP32)));
}

}  // namespace
