// --profile's arithmetic (common/train/profile.h): every op the model graph names has the kernel
// benchmark's cost, a step's FLOPs add up as the benchmark's do, nested ops are not counted twice,
// and the JSON reads back. The whole trainer with --profile: tests/cpu/profile_run.cmake.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "train/op_cost.h"
#include "train/profile.h"
#include "util/json.h"

namespace {

using gpt::Cost;
using gpt::ProfileSizes;
namespace cost = gpt::cost;

ProfileSizes d12_sizes(double B, double T) {
    const gpt::GPTConfig c = gpt::config_by_name("d12");
    ProfileSizes p;
    p.ops = gpt::op_sizes(c, c.padded_vocab(128), B, T, 2);
    p.optimizer_params = double(gpt::ParamLayout(c, c.padded_vocab(128)).total());
    p.act_copy = true;
    return p;
}

Cost cost_of(const std::string& name, const std::string& pass, const ProfileSizes& s, int rows = 0) {
    bool counted = false;
    const Cost c = gpt::profiled_op_cost(name, pass, rows, s, counted);
    EXPECT_TRUE(counted) << name;
    return c;
}

// One training step of GPT-2 124M as the graph names its ops (common/train/model_graph.h,
// common/train/gpt.h): the pass and the calls per step of each.
struct GraphOp {
    const char* name;
    const char* pass;
    int calls;  // with L = 12 blocks
};
const std::vector<GraphOp> kStep = {
    {"embedding", "forward", 1},
    {"ln_1", "forward", 1},
    {"qkv", "forward", 12},
    {"attention", "forward", 12},
    {"attn_proj", "forward", 12},
    {"residual+ln_2", "forward", 12},
    {"fc+gelu", "forward", 12},
    {"fc_proj", "forward", 12},
    {"residual+ln_1", "forward", 11},
    {"residual+ln_f", "forward", 1},
    {"lm_head", "forward", 1},
    {"classifier", "backward", 1},
    {"lm_head backward", "backward", 1},
    {"residual+ln_f backward", "backward", 1},
    {"fc_proj+gelu backward", "backward", 12},
    {"fc backward", "backward", 12},
    {"residual+ln_2 backward", "backward", 12},
    {"attn_proj backward", "backward", 12},
    {"attention backward", "backward", 12},
    {"qkv backward", "backward", 12},
    {"residual+ln_1 backward", "backward", 11},
    {"ln_1 backward", "backward", 1},
    {"embedding backward", "backward", 1},
    {"optimizer", "update", 1},
};

TEST(Profile, EveryOpOfTheGraphHasItsCost) {
    const ProfileSizes s = d12_sizes(4, 1024);
    for (const GraphOp& op : kStep) EXPECT_GT(cost_of(op.name, op.pass, s).bytes, 0) << op.name;
    // What the accounting has no model of: counted as nothing, and said so.
    for (const char* name : {"zero_grad", "gradient reduction (bucket)", "gradient reduction", "weight all-gather",
                             "gradient norm all-reduce", "loss all-reduce", "something new"}) {
        bool counted = true;
        const Cost c = gpt::profiled_op_cost(name, "update", 0, s, counted);
        EXPECT_FALSE(counted) << name;
        EXPECT_EQ(c.bytes, 0) << name;
        EXPECT_EQ(c.flops, 0) << name;
    }
}

// Each graph op is the benchmark's row of the same op (tests/bench/kernel_bench.cuh).
TEST(Profile, TheCostsAreTheKernelBenchmarks) {
    const ProfileSizes s = d12_sizes(4, 1024);
    const double C = s.ops.C;
    auto same = [](const Cost& a, const Cost& b, const char* what) {
        EXPECT_DOUBLE_EQ(a.bytes, b.bytes) << what;
        EXPECT_DOUBLE_EQ(a.flops, b.flops) << what;
    };
    same(cost_of("qkv", "forward", s), cost::matmul_forward(s.ops, C, 3 * C, true), "qkv");
    same(cost_of("qkv backward", "backward", s), cost::matmul_backward(s.ops, C, 3 * C, true), "qkv backward");
    same(cost_of("fc+gelu", "forward", s), cost::matmul_bias_gelu_forward(s.ops, C, 4 * C), "fc+gelu");
    same(cost_of("fc_proj", "forward", s), cost::matmul_forward(s.ops, 4 * C, C, true), "fc_proj");
    same(cost_of("fc_proj+gelu backward", "backward", s), cost::matmul_backward_gelu(s.ops, 4 * C, C),
         "fc_proj+gelu backward");
    same(cost_of("fc backward", "backward", s), cost::matmul_backward(s.ops, C, 4 * C, true), "fc backward");
    same(cost_of("residual+ln_2", "forward", s), cost::residual_layernorm_forward(s.ops), "residual+ln_2");
    same(cost_of("ln_1 backward", "backward", s), cost::layernorm_backward(s.ops), "ln_1 backward");
    same(cost_of("attention backward", "backward", s), cost::attention_backward(s.ops), "attention backward");
    // The loss in a training step computes its gradient too; in validation, only the loss.
    same(cost_of("classifier", "backward", s), cost::classifier_with_grad(s.ops), "classifier in a step");
    same(cost_of("classifier", "forward", s), cost::classifier_forward(s.ops), "classifier alone");
    same(cost_of("optimizer", "update", s), cost::optimizer_step(s.optimizer_params, 2, true), "optimizer");
    // A chunk of the loss (stages 04-06): the LM head over its rows only, the weight read whole.
    gpt::OpSizes chunk = s.ops;
    chunk.B = 1000.0 / chunk.T;
    same(cost_of("lm_head", "backward", s, 1000), cost::matmul_forward(chunk, C, s.ops.Vp, false), "lm_head chunk");
    same(cost_of("lm_head backward", "backward", s, 1000), cost::matmul_backward(chunk, C, s.ops.Vp, false),
         "lm_head backward chunk");
}

// A whole step's FLOPs, summed over the graph's ops, are the MFU formula's as the benchmark's
// accounting counts them (tests/bench/op_cost_test.cpp, FlopsAddUpToTheMfuFormula): so no matmul
// of the graph got another one's shape.
TEST(Profile, AStepsFlopsAddUpToTheMfuFormula) {
    const gpt::GPTConfig config = gpt::config_by_name("d12");
    const int T = 1024;
    ProfileSizes s = d12_sizes(4, T);
    s.ops.Vp = config.vocab_size;  // the formula's parameters: the vocabulary unpadded
    std::vector<gpt::TimedOp> calls;
    for (const GraphOp& op : kStep)
        for (int i = 0; i < op.calls; ++i) calls.push_back({op.name, op.pass, "", 0, 1.0});
    const gpt::ProfileReport report = gpt::summarize_profile(calls, 300.0, s);
    double flops = 0;
    for (const gpt::ProfileRow& row : report.rows) flops += row.cost.flops;

    const gpt::ParamLayout layout(config);
    double matmul_weights = 0;
    for (int t : {gpt::kWte, gpt::kQkvW, gpt::kAttProjW, gpt::kFcW, gpt::kFcProjW}) matmul_weights += layout.size[t];
    const double others = double(layout.total()) - matmul_weights;
    const double attention_difference = (12.0 - 7.0) * config.n_layer * config.n_head * config.head_size() * T;
    EXPECT_DOUBLE_EQ(flops, s.ops.N() * (gpt::flops_per_token(config, T) - 6.0 * others - attention_difference));
}

TEST(Profile, RowsSumTheCallsAndNestedOpsAreNotCountedTwice) {
    const ProfileSizes s = d12_sizes(2, 64);
    const std::vector<gpt::TimedOp> calls = {
        {"qkv", "forward", "", 0, 1.5},
        {"qkv", "forward", "", 0, 2.5},
        {"qkv backward", "backward", "", 0, 3.0},
        {"optimizer", "update", "", 0, 5.0},
        {"gradient norm all-reduce", "update", "optimizer", 0, 0.75},  // inside the optimizer's 5 ms
    };
    const gpt::ProfileReport r = gpt::summarize_profile(calls, 12.5, s);
    ASSERT_EQ(r.rows.size(), 4u);
    EXPECT_EQ(r.rows[0].name, "qkv");
    EXPECT_EQ(r.rows[0].calls, 2);
    EXPECT_DOUBLE_EQ(r.rows[0].ms, 4.0);
    EXPECT_DOUBLE_EQ(r.rows[0].cost.flops, 2 * cost::matmul_forward(s.ops, s.ops.C, 3 * s.ops.C, true).flops);
    EXPECT_EQ(r.rows[3].within, "optimizer");
    EXPECT_FALSE(r.rows[3].counted);
    EXPECT_DOUBLE_EQ(r.ops_ms, 12.0);
    EXPECT_DOUBLE_EQ(r.difference_ms(), 0.5);
    // The table names the nested op with its parent, and ends with the sum, the step and the difference.
    gpt::ProfileContext run;
    run.clock = "the host's clock";
    run.roofs.source = "none are measured on the CPU";
    const std::string table = gpt::profile_table(r, run);
    EXPECT_NE(table.find("gradient norm all-reduce (in optimizer)"), std::string::npos) << table;
    EXPECT_NE(table.find("sum of the ops"), std::string::npos) << table;
    EXPECT_NE(table.find("difference"), std::string::npos) << table;
    EXPECT_NE(table.find("no roofs: none are measured on the CPU"), std::string::npos) << table;
}

TEST(Profile, TheJsonReadsBack) {
    const ProfileSizes s = d12_sizes(16, 1024);
    const std::vector<gpt::TimedOp> calls = {
        {"fc+gelu", "forward", "", 0, 0.9},
        {"zero_grad", "backward", "", 0, 0.01},
    };
    const gpt::ProfileReport r = gpt::summarize_profile(calls, 1.0, s);
    gpt::ProfileContext run{"04_fused_kernels", "GPU \"x\"", "d12", "CUDA events on the stream", 16, 1024, 1, 1, 3,
                            true, {3000, 700, "measured at start-up"}};
    const gpt::Json j = gpt::Json::parse(gpt::profile_json(r, run));
    EXPECT_EQ(j["kind"].string, "gpt-step-profile");
    EXPECT_EQ(j["device"].string, "GPU \"x\"");
    EXPECT_EQ(j["step"].number, 3);
    EXPECT_TRUE(j["captured"].boolean);
    EXPECT_EQ(j["roof"]["gb_per_s"].number, 3000);
    ASSERT_EQ(j["ops"].array.size(), 2u);
    const gpt::Json& fc = j["ops"].array[0];
    const Cost c = cost::matmul_bias_gelu_forward(s.ops, s.ops.C, 4 * s.ops.C);
    EXPECT_NEAR(fc["flops"].number, c.flops, 1e-5 * c.flops);
    EXPECT_NEAR(fc["tflops"].number, c.flops / 0.9e-3 / 1e12, 1e-4);
    EXPECT_NEAR(fc["roof_share"].number, c.flops / 0.9e-3 / 1e12 / 700, 1e-6);
    EXPECT_EQ(fc["within"].kind, gpt::Json::Null);
    const gpt::Json& zero = j["ops"].array[1];
    EXPECT_EQ(zero["gb_per_s"].kind, gpt::Json::Null);  // not counted: no rate, no share
    EXPECT_EQ(zero["roof_share"].kind, gpt::Json::Null);
    EXPECT_NEAR(j["difference_ms"].number, 1.0 - 0.91, 1e-9);
}

TEST(Profile, FilesGoBesideTheLog) {
    EXPECT_EQ(gpt::profile_path("runs/a.jsonl", ".json"), "runs/a.profile.json");
    EXPECT_EQ(gpt::profile_path("runs/a.json", ".svg"), "runs/a.profile.svg");
    EXPECT_EQ(gpt::profile_path("log.txt", ".json"), "log.txt.profile.json");
    EXPECT_EQ(gpt::profile_path("", ".json"), "");
}

}  // namespace
