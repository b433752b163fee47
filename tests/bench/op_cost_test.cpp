// The kernel benchmark's accounting (op_cost.h), checked on the CPU: its FLOPs add up to those of
// the MFU formula, only matrix products count FLOPs, and a fusion slot never counts more bytes
// than the ops it fuses (fusing is what saves them). Also the order of --rounds (rounds.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "rounds.h"
#include "train/op_cost.h"

namespace {

using gpt::Cost;
using gpt::OpSizes;
namespace cost = gpt::cost;

OpSizes d12_sizes(double B, double T, double act_bytes) {
    const gpt::GPTConfig c = gpt::config_by_name("d12");
    return gpt::op_sizes(c, c.vocab_size, B, T, act_bytes);
}

double forward_and_backward(const Cost& forward, const Cost& backward) { return forward.flops + backward.flops; }

// One training step's FLOPs, summed over the model's matmuls and attention, forward and backward,
// are the MFU formula's (common/model/config.cpp: 6 per parameter and token, plus 12·L·H·Q·T per
// token for attention), less 6 per token for each parameter that no matmul reads (wpe, biases,
// LayerNorm gains and biases), and with attention as op_cost.h counts it: per layer and token
// 7·H·Q·T (2 forward, 5 backward) against the formula's 12·H·Q·T (4 forward, 8 backward). The
// formula credits the masked half (6 of the 12) and does not count the backward's recomputed
// scores (1 more here).
TEST(BenchAccounting, FlopsAddUpToTheMfuFormula) {
    const gpt::GPTConfig config = gpt::config_by_name("d12");
    const int T = 1024;
    const OpSizes s = d12_sizes(4, T, 2);
    const double C = s.C;
    double per_layer = forward_and_backward(cost::attention_forward(s), cost::attention_backward(s));
    for (const auto& [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}})
        per_layer +=
            forward_and_backward(cost::matmul_forward(s, in, out, true), cost::matmul_backward(s, in, out, true));
    const double lm_head =
        forward_and_backward(cost::matmul_forward(s, C, s.Vp, false), cost::matmul_backward(s, C, s.Vp, false));
    const double step = config.n_layer * per_layer + lm_head;

    const gpt::ParamLayout layout(config);
    double matmul_weights = 0;
    for (int t : {gpt::kWte, gpt::kQkvW, gpt::kAttProjW, gpt::kFcW, gpt::kFcProjW}) matmul_weights += layout.size[t];
    const double others = double(layout.total()) - matmul_weights;
    const double attention_difference = (12.0 - 7.0) * config.n_layer * config.n_head * config.head_size() * T;
    EXPECT_DOUBLE_EQ(step, s.N() * (gpt::flops_per_token(config, T) - 6.0 * others - attention_difference));
}

// Attention as FlashAttention-2 counts it (section 4.1 of the paper; tests/bench/attention.py
// counts the same): forward 4·B·NH·T²·HS halved for the causal mask, backward 2.5 times that. So
// the kernel benchmark and the attention benchmark print the same TFLOP/s for the same time.
TEST(BenchAccounting, AttentionCountsTheCausalHalf) {
    const OpSizes s = d12_sizes(16, 1024, 2);
    const double whole_square = 4 * s.B * s.NH * s.T * s.T * s.HS();  // q·kᵀ and att·v, every score
    EXPECT_DOUBLE_EQ(cost::attention_forward(s).flops, whole_square / 2);
    EXPECT_DOUBLE_EQ(cost::attention_backward(s).flops, 2.5 * whole_square / 2);
    EXPECT_DOUBLE_EQ(cost::attention_forward(s).flops, 25769803776.0);  // 25.8 GFLOP per layer
}

TEST(BenchAccounting, OnlyMatrixProductsCountFlops) {
    const OpSizes s = d12_sizes(8, 1024, 2);
    const double C = s.C;
    for (const Cost& c : {cost::matmul_forward(s, C, C, true), cost::matmul_backward(s, C, s.Vp, false),
                          cost::attention_forward(s), cost::attention_backward(s),
                          cost::matmul_bias_gelu_forward(s, C, 4 * C), cost::matmul_backward_gelu(s, 4 * C, C)})
        EXPECT_TRUE(c.matmul_like());
    for (const Cost& c : {cost::embedding_forward(s), cost::embedding_backward(s), cost::layernorm_forward(s),
                          cost::layernorm_backward(s), cost::gelu_forward(s, 100), cost::gelu_backward(s, 100),
                          cost::residual_forward(s, 100), cost::classifier_forward(s), cost::classifier_backward(s),
                          cost::classifier_with_grad(s), cost::residual_layernorm_forward(s),
                          cost::residual_layernorm_backward(s), cost::optimizer_step(1e8, 2, true)}) {
        EXPECT_FALSE(c.matmul_like());
        EXPECT_GT(c.bytes, 0.0);
    }
}

TEST(BenchAccounting, FusionSlotsCountFewerBytesThanTheirParts) {
    for (const double act : {4.0, 2.0}) {
        SCOPED_TRACE(act == 4.0 ? "fp32 activations" : "bf16 activations");
        const OpSizes s = d12_sizes(8, 1024, act);
        const double C = s.C, hidden = s.N() * 4 * C, rows = s.N() * C;
        EXPECT_LT(cost::matmul_bias_gelu_forward(s, C, 4 * C).bytes,
                  cost::matmul_forward(s, C, 4 * C, true).bytes + cost::gelu_forward(s, hidden).bytes);
        EXPECT_LT(cost::matmul_backward_gelu(s, 4 * C, C).bytes,
                  cost::matmul_backward(s, 4 * C, C, true).bytes + cost::gelu_backward(s, hidden).bytes);
        EXPECT_EQ(cost::matmul_bias_gelu_forward(s, C, 4 * C).flops, cost::matmul_forward(s, C, 4 * C, true).flops);
        EXPECT_LT(cost::residual_layernorm_forward(s).bytes,
                  cost::residual_forward(s, rows).bytes + cost::layernorm_forward(s).bytes);
        EXPECT_LT(cost::classifier_with_grad(s).bytes,
                  cost::classifier_forward(s).bytes + cost::classifier_backward(s).bytes);
    }
}

// The optimizer's bytes per parameter: gradients read twice, master weights, m and v read and
// written (32 bytes), and in mixed precision the act_t copy written.
TEST(BenchAccounting, OptimizerBytesPerParameter) {
    const double P = gpt::ParamLayout(gpt::config_by_name("d12")).total();
    EXPECT_EQ(cost::optimizer_step(P, 4, false).bytes, 32 * P);
    EXPECT_EQ(cost::optimizer_step(P, 2, true).bytes, 34 * P);
}

}  // namespace

// Each round times every entry once; over n rounds each entry comes first once, and for an even n
// follows every other entry exactly once.
TEST(Rounds, EveryEntryOnceARoundAndEveryPredecessorOnce) {
    for (size_t n : {1, 2, 3, 4, 7, 8, 16, 23}) {
        std::vector<std::vector<int>> follows(n, std::vector<int>(n, 0));
        std::vector<int> first(n, 0);
        for (size_t r = 0; r < n; ++r) {
            const std::vector<size_t> order = gpt::bench::round_order(r, n);
            ASSERT_EQ(order.size(), n);
            std::vector<int> seen(n, 0);
            for (size_t i : order) {
                ASSERT_LT(i, n);
                ++seen[i];
            }
            EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(n)) << "n " << n << " round " << r;
            ++first[order[0]];
            for (size_t k = 1; k < n; ++k) ++follows[order[k]][order[k - 1]];
        }
        EXPECT_EQ(std::count(first.begin(), first.end(), 1), static_cast<long>(n)) << "n " << n;
        for (size_t a = 0; a < n; ++a)
            for (size_t b = 0; b < n; ++b)
                if (n % 2 == 0) EXPECT_EQ(follows[a][b], a == b ? 0 : 1) << "n " << n << ": " << a << " after " << b;
                else EXPECT_LE(follows[a][b], 2) << "n " << n << ": " << a << " after " << b;
    }
}
