// The CPU reference trainer against the independent PyTorch reference (tests/reference):
// step-0 loss and every gradient tensor, and the 20-step loss curve of the reference case.
// The PyTorch outputs come from the CTest fixture `pytorch_reference`, run live.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cpu/reference_stage.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/reference_run.h"
#include "testing/tolerance.h"

using namespace gpt;
using namespace gpt::test;

namespace {

// The promise of the CPU reference: within 1e-4 relative of PyTorch.
constexpr double kRel = 1e-4;

class AgainstLivePyTorch : public ::testing::Test {
  protected:
    void SetUp() override {
        json_ = reference_output_dir() + "/micro_overfit.json";
        grads_ = reference_output_dir() + "/micro_overfit_grads0.bin";
        if (!std::filesystem::exists(json_) || !std::filesystem::exists(grads_)) {
            if (torch_required()) FAIL() << "REQUIRE_TORCH=1 but the PyTorch reference did not produce " << json_;
            GTEST_SKIP() << "no PyTorch reference output (" << json_
                         << "): install python3-torch, or see tests/reference/README.md";
        }
    }
    std::string json_, grads_;
};

}  // namespace

TEST_F(AgainstLivePyTorch, Step0LossAndEveryGradient) {
    const ReferenceRun ref = load_reference_run(json_);
    const std::vector<float> ref_grads = read_floats(grads_);
    const Step0 cpu = reference_step0<CpuReference>();
    ASSERT_EQ(cpu.grads.size(), ref_grads.size());
    EXPECT_NEAR(cpu.loss, ref.losses.at(0), kRel * ref.losses.at(0));

    const ParamLayout layout(overfit_case().config);
    for (int t = 0; t < kNumParamTensors; ++t) {
        const auto begin = layout.offset[t], end = begin + layout.size[t];
        const std::vector<float> mine(cpu.grads.begin() + begin, cpu.grads.begin() + end);
        const std::vector<float> theirs(ref_grads.begin() + begin, ref_grads.begin() + end);
        EXPECT_TRUE(rel_l2_close(std::string("gradient of ") + ParamLayout::name(t), mine, theirs, kRel));
    }
}

TEST_F(AgainstLivePyTorch, TwentyStepLossCurve) {
    const ReferenceRun ref = load_reference_run(json_);
    const Curve cpu = reference_curve<CpuReference>(load_reference_settings(json_));
    EXPECT_TRUE(curves_close("CPU reference loss curve", cpu.losses, ref.losses, kRel));
    EXPECT_TRUE(curves_close("CPU reference gradient norms", cpu.grad_norms, ref.grad_norms, kRel));
    EXPECT_LT(cpu.losses.back(), 0.5 * cpu.losses.front()) << "the reference case must overfit its batch";
}

TEST_F(AgainstLivePyTorch, CommittedCurveIsCurrent) {
    // The committed curve is what GPU tests compare against; it must be what PyTorch gives now.
    const ReferenceRun live = load_reference_run(json_);
    const ReferenceRun committed = load_reference_run(committed_curve_path());
    EXPECT_TRUE(curves_close("committed curve vs live PyTorch", committed.losses, live.losses, 1e-5))
        << "regenerate it: see tests/reference/README.md";
}

// Runs without PyTorch too: the committed curve holds the CPU reference where torch is absent.
TEST(AgainstCommittedCurve, CpuReferenceMatches) {
    const std::string path = committed_curve_path();
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const ReferenceRun ref = load_reference_run(path);
    const Curve cpu = reference_curve<CpuReference>(load_reference_settings(path));
    EXPECT_TRUE(curves_close("CPU reference vs committed PyTorch curve", cpu.losses, ref.losses, kRel));
}
