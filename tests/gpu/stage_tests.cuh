// The GPU tests of one stage. stages/CMakeLists.txt compiles this file once per stage, with
// `using TestStage = gpt::StageNN;` defined before it is included (tests/gpu/test_stage.cu.in).
//
//   Kernels  every op of the stage, forward and backward, against the fp32 CPU reference ops
//            (common/cpu/ops.h), on fresh random inputs of sizes that are not tile multiples
//   Matmul   the matmuls use the arithmetic the stage declares: fp32, TF32 or bf16; shapes that
//            run on padded copies (common/cuda/gemm.cuh) give what the direct path gives
//   Slots    the fusion slots (MatmulBiasGelu, MatmulBackwardGelu, ResidualLayerNorm,
//            ClassifierWithGrad) as the stage fills them, against the same CPU ops composed
//   Model    the whole trainer: step-0 loss and gradients against the CPU reference, the
//            loss curve against PyTorch, no device allocation after the warm-up step, updates
//            that reach the fp32 master weights, gradient accumulation, and the step recorded
//            as a CUDA Graph (which only works if the step never makes the host wait); where
//            the stage's step is repeatable, the same bits from the same seed and after a resume
//   Policy   the op table names files that exist (runs without a GPU too)
//
// Every test runs in the StageGpuTest fixture, which skips it on a machine without a GPU or with
// one older than the stage needs (and fails it instead when REQUIRE_GPU=1). How to run them: tests/gpu/README.md.
//
// The ops are called exactly as the model graph calls them (common/train/model_graph.h): activations
// and layer parameters in the stage's act_t; parameter gradients, LayerNorm statistics, losses,
// probabilities and optimizer state in fp32. Inputs are rounded to act_t before the CPU
// reference sees them, so a comparison measures the kernel's error and nothing else. Every
// tensor comparison bounds both each element and the relative L2 error of the whole tensor
// (all_close and the tolerance table, common/testing/tolerance.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cpu/ops.h"
#include "cpu/reference_stage.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/gpu_test.cuh"
#include "testing/place_in_group.h"
#include "testing/reference_case.h"
#include "testing/reference_run.h"
#include "testing/term_sizes.h"
#include "bench/attention_variants.h"
#include "bench/matmul_variants.h"
#include "bench/row_variants.h"
#include "gpu/thread_communicator.cuh"
#include "testing/tolerance.h"
#include "train/eval_hellaswag.h"
#include "train/gpt.h"
#include "train/loop.h"
#include "train/memory.h"
#include "train/options.h"
#include "train/policy.h"
#include "util/rng.h"

namespace {

using Act = typename TestStage::act_t;  // activations, matmul operands, layer parameters
using Ctx = typename TestStage::Context;
using Ops = gpt::Ops<TestStage>;  // the stage's ops with its fusion slots resolved
constexpr gpt::Precision kPrecision = TestStage::kPrecision;
// Tolerances, from the one table (common/testing/tolerance.h), by what made each output:
constexpr gpt::test::Tolerance kMatmulTol = gpt::test::matmul_tolerance(kPrecision);        // matmuls
constexpr gpt::test::Tolerance kAttentionTol = gpt::test::attention_tolerance(kPrecision);  // attention
constexpr gpt::test::Tolerance kActTol = gpt::test::storage_tolerance<Act>();  // fp32 math, stored as Act
constexpr gpt::test::Tolerance kFp32Tol = gpt::test::kFp32;                   // fp32 math, stored as fp32

// How a test that does not apply to this stage starts its skip message: tests/gpu_check.sh counts
// such skips apart from those of a machine without a GPU, which a GPU check must not have.
constexpr const char* kDoesNotApply = "does not apply to this stage: ";

using gpt::Rng;
using gpt::test::attention_backward_term_sizes;
using gpt::test::all_close;
using gpt::test::DeviceArray;
using gpt::test::DeviceScratch;
using gpt::test::random_normal;
using gpt::test::random_tokens;
using gpt::test::random_uniform;
using gpt::test::rounded;
using gpt::test::sync_and_check;
using gpt::test::test_seed;
using Vec = std::vector<float>;

Vec zeros(size_t n) { return Vec(n, 0.0f); }

// n elements of device memory the stage's code owns, as floats.
template <class T>
Vec download(Ctx& ctx, const T* device, size_t n) {
    std::vector<T> raw(n);
    TestStage::copy_out(ctx, raw.data(), device, n);
    Vec out(n);
    for (size_t i = 0; i < n; ++i) out[i] = gpt::test::element_to_float(raw[i]);
    return out;
}

// A random starting value for an accumulating output (parameter gradients, LayerNorm's dinp),
// as large as the increment the op adds where it adds something: an op that overwrites instead
// of adding, or adds in the wrong place, misses the expected values by far more than the
// tolerance.
Vec accumulator_start(Rng& rng, const Vec& increment) {
    double sum = 0.0;
    size_t nonzero = 0;
    for (float x : increment)
        if (x != 0.0f) {
            sum += double(x) * x;
            ++nonzero;
        }
    const float scale = nonzero ? static_cast<float>(std::sqrt(sum / nonzero)) : 1.0f;
    return random_normal(rng, increment.size(), scale);
}

// Logits with random values in the vocabulary and a large value in the padded columns: if a
// kernel let a padded column into the softmax, every loss and probability would be wrong.
Vec classifier_logits(Rng& rng, int N, int V, int Vp) {
    Vec logits = random_normal(rng, size_t(N) * Vp, 3.0f);
    for (int n = 0; n < N; ++n)
        for (int v = V; v < Vp; ++v) logits[size_t(n) * Vp + v] = 50.0f;
    return rounded<Act>(logits);
}

// Token ids (inputs or targets) skewed towards small ids like real text; the last one is the
// largest id, so that the last row of wte and the last column of the logits are reached.
std::vector<int> token_ids(Rng& rng, int n, int V) {
    std::vector<int> ids = random_tokens(rng, n, V);
    ids.back() = V - 1;
    return ids;
}

// Mixed precision: the optimizer keeps an act_t copy of the fp32 master weights.
constexpr bool kSeparateActParams = !std::is_same_v<Act, float>;

// A context set up for the stage (its matmul arithmetic comes from the stage's precision).
struct StageContext : Ctx {
    StageContext() : Ctx(gpt::stage_tag<TestStage>) {}
};

// Workshop exercises (docs/workshop.md) that the tests below check besides their own op: a
// workshop build with one of them unwritten fails these tests, and the message says where to look.
// The LayerNorm forward every stage runs: stage 00's warp per row (stage 04 feeds it the residual
// add), the exercise of stage 00.
constexpr const char* kLayerNormExercise = "exercise stage00.layernorm_forward: see docs/00_fp32_baseline.md#exercise";
constexpr const char* kMixedAdamWExercise =
    "exercise stage02.mixed_precision_adamw: see docs/02_bf16_autocast.md#exercise";

std::string adamw_trace() {
    return kSeparateActParams ? kMixedAdamWExercise : "AdamW on fp32 master weights, no act_t copy";
}

std::string model_trace() {
    std::string s = std::string("the whole model depends on ") + kLayerNormExercise;
    if (kSeparateActParams) s += "; and on " + std::string(kMixedAdamWExercise);
    return s;
}

}  // namespace

// A GPU that refuses a stage is told that stage 00 runs on it (util/compute_capability.h): true
// while stage 00 asks for no more than CUDA 13 builds for.
static_assert(gpt::Stage00::kMinComputeCapability == gpt::kCudaOldestComputeCapability,
              "stage 00 must run on every GPU CUDA 13 builds for");

// One fixture per suite, so that the test names read Kernels.*, Matmul.* and Model.*.
class Kernels : public gpt::test::StageGpuTest<TestStage> {};
class Matmul : public gpt::test::StageGpuTest<TestStage> {};
class Model : public gpt::test::StageGpuTest<TestStage> {};
class Slots : public gpt::test::StageGpuTest<TestStage> {};

// ---- embeddings -------------------------------------------------------------------------------

struct EmbeddingCase {
    int B, T, C, V;
};
// C = 99 rows are no whole number of 16-byte packs: the forward takes them an element at a time.
const EmbeddingCase kEmbeddingCases[] = {
    {1, 1, 36, 1000}, {2, 7, 96, 1000}, {3, 63, 100, 1000}, {2, 9, 99, 1000}, {1, 65, 36, 50257}, {4, 250, 96, 1000},
};

TEST_F(Kernels, EmbeddingForward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const EmbeddingCase& s : kEmbeddingCases) {
        SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
        const int N = s.B * s.T, maxT = s.T + 3;  // wpe has rows past T, as a model's context does
        const std::vector<int> tokens = token_ids(rng, N, s.V);
        const Vec wte = rounded<Act>(random_normal(rng, size_t(s.V) * s.C));
        const Vec wpe = rounded<Act>(random_normal(rng, size_t(maxT) * s.C, 0.5f, 0.1f));
        Vec expected(size_t(N) * s.C);
        gpt::cpu::embedding_forward(expected.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);

        DeviceArray<int> d_tokens(tokens);
        DeviceArray<Act> d_wte(wte), d_wpe(wpe);
        DeviceArray<Act> d_out(size_t(N) * s.C);  // poisoned
        TestStage::Embedding::forward(ctx, d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T, s.C);
        sync_and_check("Embedding::forward");
        EXPECT_TRUE(all_close("Embedding::forward out", d_out.download(), expected, kActTol));
    }
}

TEST_F(Kernels, EmbeddingBackward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const EmbeddingCase& s : kEmbeddingCases) {
        SCOPED_TRACE(testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
        const int N = s.B * s.T, maxT = s.T + 3;
        // Small vocabularies repeat tokens often: rows of dwte collect several positions.
        const std::vector<int> tokens = token_ids(rng, N, s.V);
        const Vec dout = rounded<Act>(random_normal(rng, size_t(N) * s.C));
        // The increments alone size the starting values of the accumulated gradients.
        Vec dwte_inc = zeros(size_t(s.V) * s.C), dwpe_inc = zeros(size_t(maxT) * s.C);
        gpt::cpu::embedding_backward(dwte_inc.data(), dwpe_inc.data(), dout.data(), tokens.data(), s.B, s.T, s.C);
        const Vec dwte_start = accumulator_start(rng, dwte_inc), dwpe_start = accumulator_start(rng, dwpe_inc);
        Vec dwte_expected = dwte_start, dwpe_expected = dwpe_start;
        gpt::cpu::embedding_backward(dwte_expected.data(), dwpe_expected.data(), dout.data(), tokens.data(), s.B, s.T,
                                     s.C);

        DeviceArray<int> d_tokens(tokens);
        DeviceArray<Act> d_dout(dout);
        DeviceArray<float> d_dwte(dwte_start), d_dwpe(dwpe_start);
        TestStage::Embedding::backward(ctx, d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), s.B, s.T,
                                       s.C);
        sync_and_check("Embedding::backward");
        EXPECT_TRUE(all_close("Embedding::backward dwte (added to)", d_dwte.download(), dwte_expected, kFp32Tol));
        EXPECT_TRUE(all_close("Embedding::backward dwpe (added to)", d_dwpe.download(), dwpe_expected, kFp32Tol));
    }
}

// ---- LayerNorm ----------------------------------------------------------------------------------

struct RowsCase {
    int N, C;
};
// Widths for each path of the LayerNorm kernels (stages/00_fp32_baseline/layernorm.cuh, and stage
// 04's fused backward in residual_layernorm.cuh). In 16-byte packs of 4 floats or 8 bf16: 99 is
// in neither, 36 and 100 only in floats. The row stays in registers between passes up to 768
// floats or 1024 bf16, which fill every slot a lane has (1000 and 1024 in fp32, and 1600, are
// read again), in stage 04's backward up to 768 bf16 (1000 keeps only its column sums there, 1600, GPT-2 XL's
// width, neither); at 640 in bf16 (80 packs) lanes 16-31 have one pack fewer than the others.
// Row counts odd and even, and 6007: more rows than the fused backward's one wave of blocks has
// warps on any GPU, so that its warps take several rows each and finish at different times.
const RowsCase kLayerNormCases[] = {{1, 36},     {31, 99},    {63, 96},     {65, 100}, {129, 640},   {1000, 768},
                                   {6007, 768}, {33, 1000},  {6007, 1000}, {17, 1024}, {7, 1600}, {6007, 1600}};

// Rows whose mean is far from 0 and whose spread changes along the row: the variance must be
// taken around the mean. Weights near 1, biases near 0, neither constant.
struct LayerNormInputs {
    Vec inp, weight, bias;
    LayerNormInputs(Rng& rng, int N, int C)
        : inp(rounded<Act>(random_normal(rng, size_t(N) * C, 1.0f, 1.5f))),
          weight(rounded<Act>(random_normal(rng, C, 0.2f, 1.0f))),
          bias(rounded<Act>(random_normal(rng, C, 0.2f, 0.1f))) {}
};

template <class Op>
void check_layernorm_forward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const RowsCase& s : kLayerNormCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const LayerNormInputs in(rng, s.N, s.C);
        Vec out(size_t(s.N) * s.C), mean(s.N), rstd(s.N);
        gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.weight.data(),
                                    in.bias.data(), s.N, s.C);

        DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias);
        DeviceArray<Act> d_out(out.size());
        DeviceArray<float> d_mean(s.N), d_rstd(s.N);
        Op::forward(ctx, d_out.data(), d_mean.data(), d_rstd.data(), d_inp.data(), d_weight.data(), d_bias.data(), s.N,
                    s.C);
        sync_and_check(what);
        EXPECT_TRUE(all_close(what + " out", d_out.download(), out, kActTol));
        EXPECT_TRUE(all_close(what + " mean", d_mean.download(), mean, kFp32Tol));
        EXPECT_TRUE(all_close(what + " rstd", d_rstd.download(), rstd, kFp32Tol));
    }
}

TEST_F(Kernels, LayerNormForward) {
    SCOPED_TRACE(kLayerNormExercise);
    check_layernorm_forward<Ops::LayerNorm>("LayerNorm::forward");
}

// The backward of LayerNorm, or of a slot whose backward is LayerNorm's (ResidualLayerNorm):
// all three outputs accumulate (dinp too: see common/cpu/ops.h).
template <class Op>
void check_layernorm_backward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const RowsCase& s : kLayerNormCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const size_t NC = size_t(s.N) * s.C;
        const LayerNormInputs in(rng, s.N, s.C);
        // The statistics the forward saved: both sides get the same ones.
        Vec out(NC), mean(s.N), rstd(s.N);
        gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.weight.data(),
                                    in.bias.data(), s.N, s.C);
        const Vec dout = rounded<Act>(random_normal(rng, NC));
        Vec dinp_inc = zeros(NC), dweight_inc = zeros(s.C), dbias_inc = zeros(s.C);
        gpt::cpu::layernorm_backward(dinp_inc.data(), dweight_inc.data(), dbias_inc.data(), dout.data(),
                                     in.inp.data(), in.weight.data(), mean.data(), rstd.data(), s.N, s.C);
        const Vec dinp_start = rounded<Act>(accumulator_start(rng, dinp_inc));
        const Vec dweight_start = accumulator_start(rng, dweight_inc), dbias_start = accumulator_start(rng, dbias_inc);
        Vec dinp_expected = dinp_start, dweight_expected = dweight_start, dbias_expected = dbias_start;
        gpt::cpu::layernorm_backward(dinp_expected.data(), dweight_expected.data(), dbias_expected.data(),
                                     dout.data(), in.inp.data(), in.weight.data(), mean.data(), rstd.data(), s.N,
                                     s.C);

        DeviceArray<Act> d_dout(dout), d_inp(in.inp), d_weight(in.weight), d_dinp(dinp_start);
        DeviceArray<float> d_mean(mean), d_rstd(rstd), d_dweight(dweight_start), d_dbias(dbias_start);
        Op::backward(ctx, d_dinp.data(), d_dweight.data(), d_dbias.data(), d_dout.data(), d_inp.data(),
                     d_weight.data(), d_mean.data(), d_rstd.data(), s.N, s.C);
        sync_and_check(what);
        EXPECT_TRUE(all_close(what + " dinp (added to)", d_dinp.download(), dinp_expected, kActTol));
        EXPECT_TRUE(all_close(what + " dweight (added to)", d_dweight.download(), dweight_expected, kFp32Tol));
        EXPECT_TRUE(all_close(what + " dbias (added to)", d_dbias.download(), dbias_expected, kFp32Tol));
    }
}

TEST_F(Kernels, LayerNormBackward) { check_layernorm_backward<Ops::LayerNorm>("LayerNorm::backward"); }

// Calls check(op) for each benchmark-only variant in the tuple Variants, under a trace that names
// it. With none, the test skips: it does not apply to the stage (`whose`: "its LayerNorm").
template <class Variants, class Check>
void check_each_variant(const char* whose, Check&& check) {
    if (std::tuple_size_v<Variants> == 0) GTEST_SKIP() << kDoesNotApply << whose << " has no benchmark variants";
    std::apply(
        [&](auto... variant) {
            const auto one = [&](auto op) {
                SCOPED_TRACE(testing::Message() << "variant: " << decltype(op)::label);
                check(op);
            };
            (one(variant), ...);
        },
        Variants{});
}

// The benchmark-only variants of the stage's LayerNorm (tests/bench/first_versions.cuh: stage 00's
// first version, a thread per row, in stages 00-03), forward and backward, on every case above: a
// comparison of their speed means something only if they compute the same thing. A stage without
// variants skips: the test does not apply to it.
TEST_F(Kernels, LayerNormBenchmarkVariants) {
    using Variants = typename gpt::bench::LayerNormVariants<typename TestStage::LayerNorm>::type;
    check_each_variant<Variants>("its LayerNorm", [](auto op) {
        using Op = decltype(op);
        check_layernorm_forward<Op>(std::string(Op::label) + ": forward");
        check_layernorm_backward<Op>(std::string(Op::label) + ": backward");
    });
}

// ---- matmul -------------------------------------------------------------------------------------

struct MatmulCase {
    int N, C, OC;
};
// The shapes of the model's projections at small widths, an odd OC (rows of the bias add that
// are no whole number of 16-byte packs), and the tied output projection's long, odd OC (the
// unpadded vocabulary).
const MatmulCase kMatmulCases[] = {
    {1, 36, 108}, {63, 96, 288}, {65, 100, 400}, {5, 36, 99}, {1000, 96, 384}, {7, 64, 50257},
};

// A linear layer's inputs: rows whose mean is not zero, weights and biases of other sizes.
struct MatmulInputs {
    Vec inp, weight, bias;
    MatmulInputs(Rng& rng, const MatmulCase& s)
        : inp(rounded<Act>(random_normal(rng, size_t(s.N) * s.C, 1.0f, 0.1f))),
          weight(rounded<Act>(random_normal(rng, size_t(s.OC) * s.C, 0.5f))),
          bias(rounded<Act>(random_normal(rng, s.OC, 0.5f, 0.2f))) {}
};

// What a linear layer's backward must give for the gradient dout of its output: dinp is
// overwritten; dweight and dbias (unless without_bias) are added to random starting values.
struct MatmulBackwardExpected {
    Vec dinp, dweight_start, dweight, dbias_start, dbias;
    MatmulBackwardExpected(Rng& rng, const MatmulCase& s, const MatmulInputs& in, const Vec& dout, bool with_bias)
        : dinp(size_t(s.N) * s.C) {
        Vec dweight_inc = zeros(size_t(s.OC) * s.C), dbias_inc = zeros(s.OC);
        gpt::cpu::matmul_backward(dinp.data(), dweight_inc.data(), with_bias ? dbias_inc.data() : nullptr,
                                  dout.data(), in.inp.data(), in.weight.data(), s.N, s.C, s.OC);
        dweight_start = accumulator_start(rng, dweight_inc);
        dbias_start = accumulator_start(rng, dbias_inc);
        dweight = dweight_start;
        dbias = dbias_start;
        Vec dinp_again(dinp.size());
        gpt::cpu::matmul_backward(dinp_again.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(),
                                  in.inp.data(), in.weight.data(), s.N, s.C, s.OC);
    }
};

// A linear layer's forward against the CPU on case s: out = inp · weightᵀ (+ bias), the output
// poisoned before forward(out, inp, weight, bias) runs.
template <class Forward>
void check_matmul_forward(const std::string& what, Rng& rng, const MatmulCase& s, bool with_bias,
                          const gpt::test::Tolerance& tol, Forward&& forward) {
    SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC
                                    << (with_bias ? " with bias" : " without bias"));
    const MatmulInputs in(rng, s);
    Vec expected(size_t(s.N) * s.OC);
    gpt::cpu::matmul_forward(expected.data(), in.inp.data(), in.weight.data(), with_bias ? in.bias.data() : nullptr,
                             s.N, s.C, s.OC);
    DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias);
    DeviceArray<Act> d_out(expected.size());
    forward(d_out.data(), d_inp.data(), d_weight.data(), with_bias ? d_bias.data() : static_cast<const Act*>(nullptr));
    sync_and_check(what.c_str());
    EXPECT_TRUE(all_close(what + " out", d_out.download(), expected, tol));
}

TEST_F(Kernels, MatmulForward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const MatmulCase& s : kMatmulCases)
        for (const bool with_bias : {true, false})
            check_matmul_forward("Matmul::forward", rng, s, with_bias, kMatmulTol,
                                 [&](Act* out, const Act* inp, const Act* weight, const Act* bias) {
                                     TestStage::Matmul::forward(ctx, out, inp, weight, bias, s.N, s.C, s.OC);
                                 });
}

TEST_F(Kernels, MatmulBackward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const MatmulCase& s : kMatmulCases) {
        // Without a bias gradient as well: the tied output projection has none.
        for (const bool with_bias : {true, false}) {
            // One product plus a bias can cancel to almost 0, and TF32's rounding of the product
            // (up to 2^-11 of it) is then large against the result: about 1% of random draws
            // would fail a right kernel. K = 1 runs without the bias.
            if (with_bias && s.C == 1) continue;
            SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC
                                            << (with_bias ? " with dbias" : " without dbias"));
            const MatmulInputs in(rng, s);
            const Vec dout = rounded<Act>(random_normal(rng, size_t(s.N) * s.OC));
            const MatmulBackwardExpected expected(rng, s, in, dout, with_bias);

            DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_dout(dout);
            DeviceArray<Act> d_dinp(expected.dinp.size());  // poisoned
            DeviceArray<float> d_dweight(expected.dweight_start), d_dbias(expected.dbias_start);
            TestStage::Matmul::backward(ctx, d_dinp.data(), d_dweight.data(), with_bias ? d_dbias.data() : nullptr,
                                        d_dout.data(), d_inp.data(), d_weight.data(), s.N, s.C, s.OC);
            sync_and_check("Matmul::backward");
            EXPECT_TRUE(all_close("Matmul::backward dinp", d_dinp.download(), expected.dinp, kMatmulTol));
            EXPECT_TRUE(
                all_close("Matmul::backward dweight (added to)", d_dweight.download(), expected.dweight, kMatmulTol));
            if (with_bias)
                EXPECT_TRUE(
                    all_close("Matmul::backward dbias (added to)", d_dbias.download(), expected.dbias, kFp32Tol));
        }
    }
}

// ---- a TF32 matmul written by hand (stages/01_tf32/tf32_wmma_matmul.cuh) --------------------------
//
// Stage 01's WMMA kernel, which the trainer does not use, against the CPU's matmul: sizes that
// are not multiples of its tiles (64 x 64 of the output, K in slices of 32, steps of 8), with and
// without a bias, at the TF32 tolerance. Then that its operands really were rounded to TF32, to
// nearest: operands 1 + a·2^-13 with a in {5, 6, 7} are exact in fp32; TF32's last mantissa bit is
// worth 8·2^-13, so rounding to nearest makes each 1 + 8·2^-13 (too large by (8 - a)·2^-13), while
// dropping the low bits, as a tensor core does with operands nobody rounded, makes each 1 (too
// small by a·2^-13). Summed over K terms, all with the same sign, the result is too large by about
// 4·2^-13 ≈ 5e-4 relative when rounded to nearest, too small by about 12·2^-13 ≈ 1.5e-3 when
// truncated, and within 1e-6 of the exact value in fp32 arithmetic.
template <class Kernel>
void check_hand_written_tf32_matmul() {
    SCOPED_TRACE("exercise stage01.tf32_tensor_cores: see docs/01_tf32.md#exercise");
    Rng rng(test_seed());
    StageContext ctx;
    const gpt::test::Tolerance tf32 = gpt::test::kTf32, fp32 = gpt::test::kFp32;
    const MatmulCase cases[] = {{1, 1, 1},       {63, 65, 1},   {65, 63, 100}, {64, 64, 64},
                                {1000, 768, 65}, {7, 1000, 63}, {130, 768, 2304}};
    for (const MatmulCase& s : cases)
        for (const bool with_bias : {true, false}) {
            // One product plus a bias can cancel to almost 0, and TF32's rounding of the product
            // (up to 2^-11 of it) is then large against the result: about 1% of random draws
            // would fail a right kernel. K = 1 runs without the bias.
            if (with_bias && s.C == 1) continue;
            check_matmul_forward(Kernel::label, rng, s, with_bias, tf32,
                                 [&](float* out, const float* inp, const float* weight, const float* bias) {
                                     Kernel::forward(ctx, out, inp, weight, bias, s.N, s.C, s.OC);
                                 });
        }

    const int N = 65, C = 765, OC = 63;
    auto operands = [&](size_t n) {
        Vec v(n);
        for (float& x : v) x = static_cast<float>(1.0 + std::ldexp(double(5 + rng.below(3)), -13));
        return v;
    };
    const Vec inp = operands(size_t(N) * C), weight = operands(size_t(OC) * C);
    std::vector<double> exact(size_t(N) * OC);  // in double every product and partial sum is exact
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double sum = 0.0;
            for (int c = 0; c < C; ++c) sum += double(inp[size_t(n) * C + c]) * double(weight[size_t(o) * C + c]);
            exact[size_t(n) * OC + o] = sum;
        }
    DeviceArray<float> d_inp(inp), d_weight(weight), d_out(exact.size());
    Kernel::forward(ctx, d_out.data(), d_inp.data(), d_weight.data(), nullptr, N, C, OC);
    sync_and_check(Kernel::label);
    const Vec out = d_out.download();
    size_t unwritten = 0, not_finite = 0;
    double mean_rel = 0.0, max_rel = 0.0;  // signed mean: rounding to nearest errs upwards here
    for (size_t i = 0; i < out.size(); ++i) {
        if (gpt::test::is_poison(out[i])) ++unwritten;
        if (!std::isfinite(out[i])) ++not_finite;
        const double rel = (double(out[i]) - exact[i]) / exact[i];
        mean_rel += rel / double(out.size());
        max_rel = std::max(max_rel, std::fabs(rel));
    }
    ASSERT_EQ(unwritten, 0u) << Kernel::label << " left elements unwritten (test seed " << test_seed() << ")";
    ASSERT_EQ(not_finite, 0u) << Kernel::label << " gave NaN or infinity (test seed " << test_seed() << ")";
    std::ostringstream report;
    report << Kernel::label << " on operands 1 + a·2^-13: mean relative error " << mean_rel << ", largest "
           << max_rel << " (TF32 rounded to nearest: about +5e-4; truncated: about -1.5e-3; fp32 arithmetic: "
           << "below 1e-6) (test seed " << test_seed() << ")";
    EXPECT_LE(max_rel, tf32.rtol) << report.str();
    EXPECT_GT(std::fabs(mean_rel), fp32.rtol)
        << "as exact as fp32 arithmetic: the operands were not rounded to TF32; " << report.str();
    EXPECT_GT(mean_rel, 0.0) << "the result is too small, as when the tensor core drops the operands' low "
                                "bits: round each element with wmma::__float_to_tf32; "
                             << report.str();
}

// The hand-written kernel of a precision's arithmetic (tests/bench/matmul_variants.h): TF32 has one.
template <class Math>
void check_hand_written_matmul_of() {
    using HandWritten = typename gpt::bench::HandWrittenMatmul<Math>::type;
    if constexpr (std::is_void_v<HandWritten>)
        GTEST_SKIP() << kDoesNotApply << "its matmuls are " << gpt::precision_name(kPrecision)
                     << "; the hand-written TF32 kernel is tested with stage 01 (TF32)";
    else
        check_hand_written_tf32_matmul<HandWritten>();
}

TEST_F(Kernels, MatmulOnTf32TensorCores) { check_hand_written_matmul_of<gpt::cuda::MatmulMath<kPrecision>>(); }

// ---- attention ----------------------------------------------------------------------------------

struct AttentionCase {
    int B, T, C, NH;
    int head_size() const { return C / NH; }
};
// Shared by every stage, as far as its attention supports them (below); head sizes 9, 24, 32,
// 9, 32 and GPT-2's 64.
const AttentionCase kAttentionCases[] = {
    {1, 1, 36, 4}, {2, 7, 96, 4}, {1, 63, 96, 3}, {2, 65, 36, 4}, {3, 32, 64, 2}, {2, 33, 128, 2},
};

// The head sizes a stage's attention handles (gpt::AttentionHeadSizes, train/policy.h): all of
// them, unless the op declares a list, as stage 03's flash attention does. Such an op runs the
// shared cases of those head sizes, and a sweep over T at each of them.
template <class Attention>
std::vector<AttentionCase> attention_cases() {
    using HeadSizes = gpt::AttentionHeadSizes<Attention>;
    std::vector<AttentionCase> cases;
    for (const AttentionCase& s : kAttentionCases)
        if (HeadSizes::supports(s.head_size())) cases.push_back(s);
    if constexpr (HeadSizes::kDeclared) {
        // One position, odd lengths below, at and past a tile of 64, and GPT-2's context of 1024,
        // with batch and heads varied (B x NH: 2 x 3, 3 x 1, 1 x 2 in turn).
        const int batch_heads[][2] = {{2, 3}, {3, 1}, {1, 2}};
        int i = 0;
        for (const int head_size : Attention::kHeadSizes)
            for (const int T : {1, 17, 63, 64, 65, 1000, 1024}) {
                const int* bh = batch_heads[i++ % 3];
                cases.push_back({T <= 65 ? bh[0] : 1, T, bh[1] * head_size, bh[1]});
            }
    } else {
        // A long row at GPT-2's head size, not a multiple of a warp's 32 lanes (stage 00's softmax
        // gives a row a warp).
        cases.push_back({1, 1000, 128, 2});
    }
    return cases;
}

// An attention op that saves only the log-sum-exp of every row (fp32, B x NH x T) declares
// kSavesLogSumExp; its forward is then also checked on that.
template <class Attention, class = void>
struct SavesLogSumExp : std::false_type {};
template <class Attention>
struct SavesLogSumExp<Attention, std::void_t<decltype(Attention::kSavesLogSumExp)>>
    : std::bool_constant<Attention::kSavesLogSumExp> {};

// log sum_{k <= t} exp(q_t · k_k / sqrt(HS)) for every (b, h, t), in double.
Vec attention_log_sum_exp(const Vec& qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const double scale = 1.0 / std::sqrt(double(HS));
    Vec lse(size_t(B) * NH * T);
    std::vector<double> scores(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const float* q = &qkv[(size_t(b) * T + t) * 3 * C + h * HS];
                double max_score = -INFINITY;
                for (int k = 0; k <= t; ++k) {
                    const float* key = &qkv[(size_t(b) * T + k) * 3 * C + C + h * HS];
                    double dot = 0.0;
                    for (int d = 0; d < HS; ++d) dot += double(q[d]) * key[d];
                    scores[k] = dot * scale;
                    max_score = std::max(max_score, scores[k]);
                }
                double sum = 0.0;
                for (int k = 0; k <= t; ++k) sum += std::exp(scores[k] - max_score);
                lse[(size_t(b) * NH + h) * T + t] = static_cast<float>(max_score + std::log(sum));
            }
    return lse;
}

// Part 0 (q), 1 (k) or 2 (v) of a [B*T, 3C] tensor, as [B*T, C].
Vec qkv_part(const Vec& qkv, size_t rows, int C, int part) {
    Vec out(rows * C);
    for (size_t r = 0; r < rows; ++r)
        std::copy_n(qkv.begin() + r * 3 * C + part * C, C, out.begin() + r * C);
    return out;
}

// One case of attention on the device: random inputs, rounded to the activation type so that the
// CPU sees what the GPU sees, and the op's forward run on them. backward() runs the op's backward
// on whatever the scratch then holds, into a poisoned output that it must write whole.
template <class Attention>
struct AttentionRun {
    AttentionRun(StageContext& ctx, Rng& rng, const AttentionCase& c)
        : s(c),
          BTC(size_t(c.B) * c.T * c.C),
          qkv(rounded<Act>(random_normal(rng, 3 * BTC))),
          dout(rounded<Act>(random_normal(rng, BTC))),
          d_qkv(qkv),
          d_out(BTC),
          d_dout(dout),
          saved(Attention::saved_bytes(c.B, c.T, c.C, c.NH, sizeof(Act))),
          scratch(Attention::scratch_bytes(c.B, c.T, c.C, c.NH, sizeof(Act))) {
        Attention::forward(ctx, d_out.data(), saved.data(), d_qkv.data(), s.B, s.T, s.C, s.NH, scratch.data());
        sync_and_check("Attention::forward");
    }
    std::vector<Act> backward(StageContext& ctx) {
        DeviceArray<Act> d_dqkv(3 * BTC);
        Attention::backward(ctx, d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out.data(), saved.data(), s.B, s.T,
                            s.C, s.NH, scratch.data());
        sync_and_check("Attention::backward");
        return d_dqkv.download_raw();
    }
    // The CPU reference (fp32): the output and, with `backward`, dqkv for dout and the size of
    // the terms each element of it was summed from (testing/term_sizes.h).
    void expected(Vec& out, Vec* dqkv, Vec* term_sizes = nullptr) const {
        out.assign(BTC, 0.0f);
        Vec att(size_t(s.B) * s.NH * s.T * s.T);
        gpt::cpu::attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.C, s.NH);
        if (dqkv) {
            dqkv->assign(3 * BTC, 0.0f);
            gpt::cpu::attention_backward(dqkv->data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C, s.NH);
        }
        if (term_sizes) *term_sizes = attention_backward_term_sizes(qkv, dout, att, s.B, s.T, s.C, s.NH);
    }

    const AttentionCase s;
    const size_t BTC;
    const Vec qkv, dout;
    DeviceArray<Act> d_qkv, d_out, d_dout;
    DeviceScratch saved, scratch;
};

Vec as_floats(const std::vector<Act>& raw) {
    Vec out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = gpt::test::element_to_float(raw[i]);
    return out;
}

std::string case_name(const AttentionCase& s) {
    return (testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " (head size "
                               << s.head_size() << ")")
        .GetString();
}

// dq, dk and dv of a backward, each on its own, against the CPU's, each element's atol in units of
// the larger of the tensor's rms and its term size (testing/term_sizes.h).
void expect_dqkv_close(const std::string& what, const Vec& dqkv, const Vec& expected, const Vec& term_sizes,
                       const AttentionCase& s) {
    const size_t rows = size_t(s.B) * s.T;
    const char* names[3] = {" dq", " dk", " dv"};
    for (int part = 0; part < 3; ++part)
        EXPECT_TRUE(all_close(what + names[part], qkv_part(dqkv, rows, s.C, part),
                              qkv_part(expected, rows, s.C, part), kAttentionTol,
                              qkv_part(term_sizes, rows, s.C, part)));
}

// The forward of one case against the CPU: the output and, where the op saves it, the log-sum-exp.
template <class Attention = TestStage::Attention>
void check_attention_forward(StageContext& ctx, Rng& rng, const AttentionCase& s) {
    SCOPED_TRACE(case_name(s));
    AttentionRun<Attention> run(ctx, rng, s);
    Vec out;
    run.expected(out, nullptr);
    EXPECT_TRUE(all_close("Attention::forward out", run.d_out.download(), out, kAttentionTol));
    if constexpr (SavesLogSumExp<Attention>::value) {
        // The log-sum-exp is computed in fp32 from bf16 products: an absolute error of a few
        // bf16 steps of the largest score, which is what the attention tolerance allows.
        Vec lse(size_t(s.B) * s.NH * s.T);
        CUDA_CHECK(cudaMemcpy(lse.data(), run.saved.data(), lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
        EXPECT_TRUE(all_close("Attention::forward log-sum-exp (saved)", lse,
                              attention_log_sum_exp(run.qkv, s.B, s.T, s.C, s.NH), kAttentionTol));
    }
}

TEST_F(Kernels, AttentionForward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const AttentionCase& s : attention_cases<TestStage::Attention>()) check_attention_forward(ctx, rng, s);
}

// Text generation's attention over the key/value cache (common/cuda/cached_attention.cuh, the
// same in every stage): the queries of rows past .. past+n-1 against every row up to their own,
// against cpu::attention_cached. Head sizes 16 and 64; the cache empty, short, odd and at
// GPT-2's context.
TEST_F(Kernels, CachedAttention) {
    Rng rng(test_seed());
    StageContext ctx;
    const int cases[][4] = {{0, 1, 48, 3}, {0, 9, 48, 3}, {37, 1, 48, 3}, {37, 5, 768, 12}, {1023, 1, 768, 12},
                            {1000, 24, 128, 2}};
    for (const auto& [past, n, C, NH] : cases) {
        SCOPED_TRACE(testing::Message() << "past=" << past << " n=" << n << " C=" << C << " NH=" << NH);
        const Vec qkv = rounded<Act>(random_normal(rng, size_t(past + n) * 3 * C));
        Vec out(size_t(n) * C);
        gpt::cpu::attention_cached(out.data(), qkv.data(), past, n, C, NH);
        DeviceArray<Act> d_qkv(qkv), d_out(size_t(n) * C);
        TestStage::cached_attention(ctx, d_out.data(), static_cast<const Act*>(d_qkv.data()), past, n, C, NH);
        sync_and_check("cached_attention");
        // fp32 arithmetic on act_t inputs, stored as act_t.
        EXPECT_TRUE(all_close("cached_attention out", d_out.download(), rounded<Act>(out), kActTol));
    }
}

// The backward of one case against the CPU, reading what the op's own forward saved.
template <class Attention = TestStage::Attention>
void check_attention_backward(StageContext& ctx, Rng& rng, const AttentionCase& s) {
    SCOPED_TRACE(case_name(s));
    AttentionRun<Attention> run(ctx, rng, s);
    Vec out, dqkv_expected, term_sizes;
    run.expected(out, &dqkv_expected, &term_sizes);
    // Other ops use the scratch between forward and backward: the backward must not
    // expect to find anything there.
    run.scratch.fill_with_nan();
    expect_dqkv_close("Attention::backward", as_floats(run.backward(ctx)), dqkv_expected, term_sizes, s);
}

TEST_F(Kernels, AttentionBackward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const AttentionCase& s : attention_cases<TestStage::Attention>()) check_attention_backward(ctx, rng, s);
}

// Sequences longer than GPT-2's context, one sequence and one head of each head size the op
// handles (stage 03: 16 and 32 blocks of 128 queries). Only for an attention op that declares its
// head sizes (a tiled kernel, stage 03's): the attention tolerances of common/testing/tolerance.h
// were worked out for T up to 1024, which is all the materialised attention of stages 00-02 is
// checked at. Its own test, so that the sanitizers, which run the other kernel tests
// (tests/gpu/checks.cmake), need not take minutes over it.
TEST_F(Kernels, AttentionLongSequences) {
    Rng rng(test_seed());
    StageContext ctx;
    using HeadSizes = gpt::AttentionHeadSizes<TestStage::Attention>;
    // The loop in an else branch, not after a return: nvcc warns of a loop it can never reach.
    if constexpr (!HeadSizes::kDeclared) {
        GTEST_SKIP() << kDoesNotApply << "its attention declares no head sizes (Kernels.AttentionForward "
                     << "checks it at T up to 1024)";
    } else {
        for (const int head_size : {16, 32, 64}) {
            if (!HeadSizes::supports(head_size)) continue;
            for (const int T : {2048, 4096}) {
                check_attention_forward(ctx, rng, {1, T, head_size, 1});
                check_attention_backward(ctx, rng, {1, T, head_size, 1});
            }
        }
    }
}

// An attention op whose backward promises the same bits on every run declares kBitwiseRepeatable
// (stage 03's, and every variant of it but the atomic-dq one): its backward is then run twice and
// compared bit for bit.
template <class Attention, class = void>
struct BitwiseRepeatable : std::false_type {};
template <class Attention>
struct BitwiseRepeatable<Attention, std::void_t<decltype(Attention::kBitwiseRepeatable)>>
    : std::bool_constant<Attention::kBitwiseRepeatable> {};

void expect_same_bits(const std::vector<Act>& first, const std::vector<Act>& second) {
    size_t differ = 0, at = 0;
    for (size_t i = 0; i < first.size(); ++i)
        if (std::memcmp(&first[i], &second[i], sizeof(Act)) != 0 && differ++ == 0) at = i;
    using gpt::test::element_to_float;
    EXPECT_EQ(differ, 0u) << differ << " of " << first.size() << " elements of dqkv differ between two runs; the "
                          << "first, " << at << ", is " << element_to_float(first[at]) << " then "
                          << element_to_float(second[at]);
}

template <class Attention>
void check_backward_bit_for_bit(StageContext& ctx, Rng& rng) {
    const AttentionCase s{2, 1000, 192, 3};
    SCOPED_TRACE("backward twice, bit for bit: " + case_name(s));
    AttentionRun<Attention> run(ctx, rng, s);
    const std::vector<Act> first = run.backward(ctx), second = run.backward(ctx);
    expect_same_bits(first, second);
}

// An attention op whose forward runs without tensor cores declares kTensorCoreForward = false
// (stage 03's BasicFlashForward, stages/03_flash_attention/basic_flash_forward.cuh).
template <class Attention, class = void>
struct ForwardWithoutTensorCores : std::false_type {};
template <class Attention>
struct ForwardWithoutTensorCores<Attention, std::void_t<decltype(Attention::kTensorCoreForward)>>
    : std::bool_constant<!Attention::kTensorCoreForward> {};
template <class Variants>
struct AnyForwardWithoutTensorCores;
template <class... A>
struct AnyForwardWithoutTensorCores<std::tuple<A...>> : std::bool_constant<(ForwardWithoutTensorCores<A>::value || ...)> {};

// The variants of the stage's attention that only the benchmark uses (stages 00-02: the first version
// of the softmax, a thread per row, tests/bench/first_versions.cuh; from stage 03 on,
// tests/bench/attention_variants.cuh: the kernels before FlashAttention-2's design, 16 rows per
// warp, FlashAttention-2's atomic dq, blocks of 128 keys or queries in the backward): a comparison
// of their speed means something only if they compute the same thing. Each on the cases of its head sizes at T = 1, 65, 1000 and 1024 (those it has). A
// stage without variants skips: the test does not apply to it.
// The forward without tensor cores has a test of its own, below (its backward is the stage's), so
// that its workshop exercise is judged by that test alone.
TEST_F(Kernels, AttentionBenchmarkVariants) {
    Rng rng(test_seed());
    StageContext ctx;
    using Variants = typename gpt::bench::AttentionVariants<TestStage::Attention>::type;
    check_each_variant<Variants>("its attention", [&](auto op) {
        using A = decltype(op);
        if constexpr (!ForwardWithoutTensorCores<A>::value) {
            for (const AttentionCase& s : attention_cases<A>()) {
                if (s.T != 1 && s.T != 65 && s.T < 1000) continue;
                check_attention_forward<A>(ctx, rng, s);
                check_attention_backward<A>(ctx, rng, s);
            }
            if constexpr (BitwiseRepeatable<A>::value) check_backward_bit_for_bit<A>(ctx, rng);
        }
    });
}

// The forward without tensor cores, stage 03's first workshop exercise and one of the benchmark's
// variants: its output and log-sum-exp against the CPU on every case of its head sizes (T = 1 to
// 1024, odd lengths, rows past T in the last block). Stages whose attention has no such variant
// (00-02) skip. Its backward is the stage's own, which Kernels.AttentionBackward checks.
TEST_F(Kernels, AttentionForwardWithoutTensorCores) {
    Rng rng(test_seed());
    StageContext ctx;
    using Variants = typename gpt::bench::AttentionVariants<TestStage::Attention>::type;
    if (!AnyForwardWithoutTensorCores<Variants>::value)
        GTEST_SKIP() << kDoesNotApply << "its attention has no forward without tensor cores";
    std::apply(
        [&](auto... variant) {
            auto check = [&](auto op) {
                using A = decltype(op);
                if constexpr (ForwardWithoutTensorCores<A>::value) {
                    SCOPED_TRACE(testing::Message() << "variant: " << A::label);
                    for (const AttentionCase& s : attention_cases<A>()) check_attention_forward<A>(ctx, rng, s);
                }
            };
            (check(variant), ...);
        },
        Variants{});
}

// The backward twice on the same inputs and the same scratch: filled with NaN before the first run,
// left as the first run left it for the second. What the first run leaves there (D; the atomic-dq
// variant's fp32 sums of dq, which each backward must set to 0 itself) must not change the second,
// and both must match the CPU. An op that declares kBitwiseRepeatable (stage 03's: every sum made
// by one block in one order) must give the same bits twice; one that adds with atomics, in
// whatever order the blocks run, is compared with its first run within the attention tolerance
// (docs/03b_flash_attention_tensor_cores.md, "What determinism costs").
TEST_F(Kernels, AttentionBackwardRepeats) {
    Rng rng(test_seed());
    StageContext ctx;
    const AttentionCase s{2, 1000, 192, 3};  // GPT-2's head size of 64, which every stage handles
    SCOPED_TRACE(case_name(s));
    AttentionRun<TestStage::Attention> run(ctx, rng, s);
    Vec out, dqkv_expected, term_sizes;
    run.expected(out, &dqkv_expected, &term_sizes);
    run.scratch.fill_with_nan();
    const std::vector<Act> first = run.backward(ctx), second = run.backward(ctx);
    if constexpr (BitwiseRepeatable<TestStage::Attention>::value) {
        expect_same_bits(first, second);
    } else {
        expect_dqkv_close("Attention::backward, second run against the first", as_floats(second), as_floats(first),
                          term_sizes, s);
    }
    expect_dqkv_close("Attention::backward, second run", as_floats(second), dqkv_expected, term_sizes, s);
}

// The device memory one attention layer takes, forward and backward, at T and at 4T (GPT-2's
// width, 2 sequences): its inputs and outputs grow 4x. An op that saves only the log-sum-exp
// (stage 03) must grow no faster than that; one that keeps the B x NH x T x T probabilities
// (stages 00-02) grows by far more, and the test checks that too, so that it shows the
// difference rather than assuming it. Measured as free device memory (cudaMemGetInfo), which
// sees every allocation, the op's own included; it reads the whole GPU, so it runs alone
// (CTest: RUN_SERIAL).
TEST_F(Kernels, AttentionMemoryAgainstT) {
    Rng rng(test_seed());
    StageContext ctx;
    const int B = 2, C = 768, NH = 12;
    auto free_memory = [] {
        CUDA_CHECK(cudaDeviceSynchronize());
        size_t free = 0, total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free, &total));
        return free;
    };
    auto used_at = [&](int T) {
        const size_t before = free_memory();
        {
            const size_t BTC = size_t(B) * T * C;
            DeviceArray<Act> d_qkv(rounded<Act>(random_normal(rng, 3 * BTC))), d_out(BTC),
                d_dout(rounded<Act>(random_normal(rng, BTC))), d_dqkv(3 * BTC);
            DeviceScratch saved(TestStage::Attention::saved_bytes(B, T, C, NH, sizeof(Act)));
            DeviceScratch scratch(TestStage::Attention::scratch_bytes(B, T, C, NH, sizeof(Act)));
            TestStage::Attention::forward(ctx, d_out.data(), saved.data(), d_qkv.data(), B, T, C, NH, scratch.data());
            TestStage::Attention::backward(ctx, d_dqkv.data(), d_dout.data(), d_qkv.data(), d_out.data(), saved.data(),
                                           B, T, C, NH, scratch.data());
            sync_and_check("Attention forward and backward at T = " + std::to_string(T));
            const size_t during = free_memory();
            return before - during;
        }
    };
    const int T = 1024;
    used_at(T);  // warm-up: libraries that set themselves up on first use
    const double mib = 1024.0 * 1024.0;
    const size_t small = used_at(T), large = used_at(4 * T);
    std::cout << "[          ] attention memory: " << small / mib << " MiB at T = " << T << ", " << large / mib
              << " MiB at T = " << 4 * T << " (" << double(large) / double(small) << "x)\n";
    ASSERT_GT(small, 0u) << "no device memory used at T = " << T;
    if constexpr (SavesLogSumExp<TestStage::Attention>::value) {
        // 4x, and the driver's 2 MiB pages for each of the six allocations.
        EXPECT_LE(large, 4 * small + size_t(6 * 2 * mib))
            << "memory grew faster than T: " << small << " bytes at T = " << T << ", " << large << " at " << 4 * T;
    } else {
        EXPECT_GE(large, 8 * small) << "an attention that keeps the T x T probabilities grew only " << small
                                    << " -> " << large << " bytes from T = " << T << " to " << 4 * T;
    }
}

// ---- element-wise ops ---------------------------------------------------------------------------

// Counts that are not multiples of a block, down to a single element.
const size_t kElementCounts[] = {1, 63, 65, 1000, 100003};

// The element-wise kernels read and write 16-byte packs where every array starts on a 16-byte
// boundary, one element at a time where one does not. Each case runs both: its arrays start at
// element `shift` of their buffers, 0 (aligned, as cudaMalloc's) or 1 (not, in fp32 or bf16).
const size_t kShifts[] = {0, 1};

// `v` behind `shift` elements of padding (what the kernel must neither read as its own nor write).
Vec shifted(const Vec& v, size_t shift) {
    Vec out(shift, 0.25f);
    out.insert(out.end(), v.begin(), v.end());
    return out;
}

// An element-wise op's output array at `shift`, poisoned, with a pack's worth of poison after it,
// and what the op wrote there: the elements before and after the array must still hold the poison.
struct ShiftedOutput {
    static constexpr size_t kAfter = 8;
    ShiftedOutput(size_t n, size_t shift) : n(n), shift(shift), d(shift + n + kAfter) {}
    Act* data() { return d.data() + shift; }
    Vec download(const char* what) const {
        const Vec all = d.download();
        for (size_t i = 0; i < all.size(); ++i)
            if (i < shift || i >= shift + n)
                EXPECT_TRUE(gpt::test::is_poison(all[i]))
                    << what << " wrote element " << int64_t(i) - int64_t(shift) << " of an array of " << n;
        return Vec(all.begin() + shift, all.begin() + shift + n);
    }
    size_t n, shift;
    DeviceArray<Act> d;  // poisoned
};

template <class Gelu>
void check_gelu_forward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const size_t n : kElementCounts)
        for (const size_t shift : kShifts) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " shift=" << shift);
            // Wide enough to reach both tails, where tanh saturates.
            const Vec inp = rounded<Act>(random_normal(rng, n, 2.0f, -0.3f));
            Vec expected(n);
            gpt::cpu::gelu_forward(expected.data(), inp.data(), n);

            DeviceArray<Act> d_inp(shifted(inp, shift));
            ShiftedOutput out(n, shift);
            Gelu::forward(ctx, out.data(), d_inp.data() + shift, n);
            sync_and_check(what);
            EXPECT_TRUE(all_close(what + " out", out.download(what.c_str()), expected, kActTol));
        }
}

template <class Gelu>
void check_gelu_backward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const size_t n : kElementCounts)
        for (const size_t shift : kShifts) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " shift=" << shift);
            const Vec inp = rounded<Act>(random_normal(rng, n, 2.0f, -0.3f));
            const Vec dout = rounded<Act>(random_normal(rng, n));
            Vec expected(n);
            gpt::cpu::gelu_backward(expected.data(), inp.data(), dout.data(), n);

            DeviceArray<Act> d_inp(shifted(inp, shift)), d_dout(shifted(dout, shift));
            ShiftedOutput dinp(n, shift);
            Gelu::backward(ctx, dinp.data(), d_inp.data() + shift, d_dout.data() + shift, n);
            sync_and_check(what);
            EXPECT_TRUE(all_close(what + " dinp", dinp.download(what.c_str()), expected, kActTol));
            // In place, as stage 04's matmul backward calls it when cuBLASLt has no GELU epilogue:
            // dinp over dout.
            Gelu::backward(ctx, d_dout.data() + shift, d_inp.data() + shift, d_dout.data() + shift, n);
            sync_and_check(what + " (in place)");
            const Vec in_place = d_dout.download();
            EXPECT_TRUE(all_close(what + " dinp (in place)", Vec(in_place.begin() + shift, in_place.end()), expected,
                                  kActTol));
        }
}

TEST_F(Kernels, GeluForward) { check_gelu_forward<Ops::Gelu>("Gelu::forward"); }
TEST_F(Kernels, GeluBackward) { check_gelu_backward<Ops::Gelu>("Gelu::backward"); }

// The benchmark-only variants of the stage's GELU (tests/bench/first_versions.cuh: the first
// version, one element a thread, in every stage), on every case above.
TEST_F(Kernels, GeluBenchmarkVariants) {
    using Variants = typename gpt::bench::GeluVariants<typename TestStage::Gelu>::type;
    check_each_variant<Variants>("its GELU", [](auto op) {
        using Op = decltype(op);
        check_gelu_forward<Op>(std::string(Op::label) + ": forward");
        check_gelu_backward<Op>(std::string(Op::label) + ": backward");
    });
}

// The residual add has no backward op: the graph passes the gradient to both inputs itself.
TEST_F(Kernels, ResidualForward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const size_t n : kElementCounts)
        for (const size_t shift : kShifts) {
            SCOPED_TRACE(testing::Message() << "n=" << n << " shift=" << shift);
            const Vec a = rounded<Act>(random_normal(rng, n, 1.0f, 0.5f));
            const Vec b = rounded<Act>(random_normal(rng, n, 0.3f));
            Vec expected(n);
            gpt::cpu::residual_forward(expected.data(), a.data(), b.data(), n);

            DeviceArray<Act> d_a(shifted(a, shift)), d_b(shifted(b, shift));
            ShiftedOutput out(n, shift);
            TestStage::Residual::forward(ctx, out.data(), d_a.data() + shift, d_b.data() + shift, n);
            sync_and_check("Residual::forward");
            EXPECT_TRUE(all_close("Residual::forward out", out.download("Residual::forward"), expected, kActTol));
            // In place, as stage 04 adds a bias gradient into the step's: out over a.
            TestStage::Residual::forward(ctx, d_a.data() + shift, d_a.data() + shift, d_b.data() + shift, n);
            sync_and_check("Residual::forward (in place)");
            const Vec in_place = d_a.download();
            EXPECT_TRUE(all_close("Residual::forward out (in place)", Vec(in_place.begin() + shift, in_place.end()),
                                  expected, kActTol));
        }
}

// ---- classifier: softmax and cross-entropy --------------------------------------------------------

struct ClassifierCase {
    int N, V, Vp;
};
// Vp == V and Vp > V (V rounded up to a multiple of 64), for a small and for GPT-2's vocabulary.
const ClassifierCase kClassifierCases[] = {
    {1, 1000, 1000}, {63, 1000, 1024}, {65, 50257, 50257}, {7, 50257, 50304},
};
// The cases a classifier takes: those with padded columns only if it masks them (stage 04's
// fused classifier does not; stage 05 adds the mask, and the model refuses padding without it).
template <class Classifier>
std::vector<ClassifierCase> classifier_cases() {
    std::vector<ClassifierCase> cases;
    for (const ClassifierCase& s : kClassifierCases)
        if (s.Vp == s.V || gpt::masks_padding_v<Classifier>) cases.push_back(s);
    return cases;
}

template <class Op>
void check_classifier_forward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const ClassifierCase& s : classifier_cases<Op>()) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " V=" << s.V << " Vp=" << s.Vp);
        const Vec logits = classifier_logits(rng, s.N, s.V, s.Vp);
        const std::vector<int> targets = token_ids(rng, s.N, s.V);
        Vec losses(s.N), probs(size_t(s.N) * s.Vp);
        gpt::cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), s.N, s.V,
                                               s.Vp);

        DeviceArray<Act> d_logits(logits);
        DeviceArray<int> d_targets(targets);
        DeviceArray<float> d_losses(s.N);
        DeviceScratch saved(Op::saved_bytes(s.N, s.Vp, sizeof(Act)));
        DeviceScratch scratch(Op::scratch_bytes(s.N, s.Vp, sizeof(Act)));
        Op::forward(ctx, d_losses.data(), saved.data(), d_logits.data(), d_targets.data(), s.N, s.V,
                                       s.Vp, scratch.data());
        sync_and_check(what + "forward");
        EXPECT_TRUE(all_close(what + "forward losses", d_losses.download(), losses, kFp32Tol));
    }
}

template <class Op>
void check_classifier_backward(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const ClassifierCase& s : classifier_cases<Op>()) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " V=" << s.V << " Vp=" << s.Vp);
        const Vec logits = classifier_logits(rng, s.N, s.V, s.Vp);
        const std::vector<int> targets = token_ids(rng, s.N, s.V);
        const float dloss = 1.0f / s.N;  // the loss is a mean over the N positions, as in the graph
        Vec losses(s.N), probs(size_t(s.N) * s.Vp), dlogits_expected(probs.size());
        gpt::cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), s.N, s.V,
                                               s.Vp);
        gpt::cpu::softmax_crossentropy_backward(dlogits_expected.data(), probs.data(), targets.data(), dloss, s.N,
                                                s.V, s.Vp);

        // The backward reads what the stage's own forward saved.
        DeviceArray<Act> d_logits(logits);
        DeviceArray<int> d_targets(targets);
        DeviceArray<float> d_losses(s.N);
        DeviceScratch saved(Op::saved_bytes(s.N, s.Vp, sizeof(Act)));
        DeviceScratch scratch(Op::scratch_bytes(s.N, s.Vp, sizeof(Act)));
        Op::forward(ctx, d_losses.data(), saved.data(), d_logits.data(), d_targets.data(), s.N, s.V,
                                       s.Vp, scratch.data());
        sync_and_check(what + "forward");
        scratch.fill_with_nan();

        // Into a separate, poisoned array: every logit's gradient is written, padded ones as 0.
        DeviceArray<Act> d_dlogits(probs.size());
        Op::backward(ctx, d_dlogits.data(), saved.data(), d_logits.data(), d_targets.data(), dloss, s.N, s.V, s.Vp,
                                        scratch.data());
        sync_and_check(what + "backward");
        EXPECT_TRUE(all_close(what + "backward dlogits", d_dlogits.download(), dlogits_expected, kActTol));

        // In place, as the graph calls it: dlogits reuses the logits' memory.
        scratch.fill_with_nan();
        Op::backward(ctx, d_logits.data(), saved.data(), d_logits.data(), d_targets.data(), dloss, s.N, s.V, s.Vp,
                                        scratch.data());
        sync_and_check(what + "backward in place");
        EXPECT_TRUE(all_close(what + "backward dlogits written over the logits", d_logits.download(),
                              dlogits_expected, kActTol));
    }
}

TEST_F(Kernels, ClassifierForward) { check_classifier_forward<typename TestStage::Classifier>("Classifier::"); }
TEST_F(Kernels, ClassifierBackward) { check_classifier_backward<typename TestStage::Classifier>("Classifier::"); }

// The benchmark-only variants of the stage's classifier (tests/bench/first_versions.cuh: stage 00's
// first version, in stages 00-03), checked as the stage's own. A stage without variants skips.
TEST_F(Kernels, ClassifierBenchmarkVariants) {
    using Variants = typename gpt::bench::ClassifierVariants<typename TestStage::Classifier>::type;
    check_each_variant<Variants>("its classifier", [](auto op) {
        using Op = decltype(op);
        check_classifier_forward<Op>(std::string(Op::label) + ": ");
        check_classifier_backward<Op>(std::string(Op::label) + ": ");
    });
}

// ---- fusion slots -----------------------------------------------------------------------------------
//
// What the graph calls for matmul + bias + GELU, residual add + LayerNorm and the classifier with
// its gradient: the single ops above one after another (train/compose.h) until a stage fuses
// them. Against the same CPU ops, composed.

// The MLP's first layer: OC = 4C, N not a multiple of any tile.
const MatmulCase kMlpCases[] = {{1, 36, 144}, {63, 96, 384}, {65, 100, 400}, {1000, 96, 384}};

TEST_F(Slots, MatmulBiasGeluForward) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const MatmulCase& s : kMlpCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC);
        const MatmulInputs in(rng, s);
        Vec pre(size_t(s.N) * s.OC), out(pre.size());
        gpt::cpu::matmul_forward(pre.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C, s.OC);
        gpt::cpu::gelu_forward(out.data(), pre.data(), pre.size());

        DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias), d_out(out.size()), d_pre(pre.size());
        Ops::MatmulBiasGelu::forward(ctx, d_out.data(), d_pre.data(), d_inp.data(), d_weight.data(), d_bias.data(),
                                     s.N, s.C, s.OC);
        sync_and_check("MatmulBiasGelu::forward");
        EXPECT_TRUE(all_close("MatmulBiasGelu::forward pre-activation", d_pre.download(), pre, kMatmulTol));
        EXPECT_TRUE(all_close("MatmulBiasGelu::forward out", d_out.download(), out, kMatmulTol));
    }
}

// The MLP's second layer, 4C -> C, whose input is gelu(pre): its backward carried on through
// the GELU gives the gradient of pre, dpre = gelu'(pre) ⊙ (dout · W).
const MatmulCase kMlpProjectionCases[] = {{1, 144, 36}, {63, 384, 96}, {65, 400, 100}, {1000, 384, 96}};

TEST_F(Slots, MatmulBackwardGelu) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const MatmulCase& s : kMlpProjectionCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC);
        const size_t NC = size_t(s.N) * s.C;
        const MatmulInputs in(rng, s);
        const Vec pre = rounded<Act>(random_normal(rng, NC, 2.0f, -0.3f));  // both tails of the GELU
        const Vec dout = rounded<Act>(random_normal(rng, size_t(s.N) * s.OC));
        const MatmulBackwardExpected expected(rng, s, in, dout, true);
        Vec dpre(NC);  // the GELU's backward of the exact dinp
        gpt::cpu::gelu_backward(dpre.data(), pre.data(), expected.dinp.data(), NC);

        DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_pre(pre), d_dout(dout);
        DeviceArray<Act> d_dpre(NC);  // poisoned
        DeviceArray<float> d_dweight(expected.dweight_start), d_dbias(expected.dbias_start);
        Ops::MatmulBackwardGelu::backward(ctx, d_dpre.data(), d_dweight.data(), d_dbias.data(), d_dout.data(),
                                          d_inp.data(), d_pre.data(), d_weight.data(), s.N, s.C, s.OC);
        sync_and_check("MatmulBackwardGelu::backward");
        EXPECT_TRUE(all_close("MatmulBackwardGelu::backward dpre", d_dpre.download(), dpre, kMatmulTol));
        EXPECT_TRUE(all_close("MatmulBackwardGelu::backward dweight (added to)", d_dweight.download(),
                              expected.dweight, kMatmulTol));
        EXPECT_TRUE(all_close("MatmulBackwardGelu::backward dbias (added to)", d_dbias.download(), expected.dbias,
                              kFp32Tol));
    }
}

TEST_F(Slots, ResidualLayerNormForward) {
    SCOPED_TRACE(kLayerNormExercise);
    Rng rng(test_seed());
    StageContext ctx;
    for (const RowsCase& s : kLayerNormCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C);
        const size_t NC = size_t(s.N) * s.C;
        const Vec a = rounded<Act>(random_normal(rng, NC, 1.0f, 0.5f));  // the residual stream
        const Vec b = rounded<Act>(random_normal(rng, NC, 0.5f));        // what a branch adds to it
        const LayerNormInputs params(rng, 1, s.C);
        Vec residual(NC), out(NC), mean(s.N), rstd(s.N);
        gpt::cpu::residual_forward(residual.data(), a.data(), b.data(), NC);
        // The LayerNorm normalises the residual as it is stored (rounded to Act).
        const Vec stored = rounded<Act>(residual);
        gpt::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), stored.data(), params.weight.data(),
                                    params.bias.data(), s.N, s.C);

        DeviceArray<Act> d_a(a), d_b(b), d_weight(params.weight), d_bias(params.bias);
        DeviceArray<Act> d_residual(NC), d_out(NC);
        DeviceArray<float> d_mean(s.N), d_rstd(s.N);
        Ops::ResidualLayerNorm::forward(ctx, d_residual.data(), d_out.data(), d_mean.data(), d_rstd.data(),
                                        d_a.data(), d_b.data(), d_weight.data(), d_bias.data(), s.N, s.C);
        sync_and_check("ResidualLayerNorm::forward");
        EXPECT_TRUE(all_close("ResidualLayerNorm::forward residual", d_residual.download(), residual, kActTol));
        EXPECT_TRUE(all_close("ResidualLayerNorm::forward out", d_out.download(), out, kActTol));
        EXPECT_TRUE(all_close("ResidualLayerNorm::forward mean", d_mean.download(), mean, kFp32Tol));
        EXPECT_TRUE(all_close("ResidualLayerNorm::forward rstd", d_rstd.download(), rstd, kFp32Tol));
    }
}

// The add's backward is free: the slot's backward is the LayerNorm's, adding into the gradient
// of the residual (the "dinp" of the check).
TEST_F(Slots, ResidualLayerNormBackward) {
    check_layernorm_backward<Ops::ResidualLayerNorm>("ResidualLayerNorm::backward");
}

// The loss and the logits' gradient in one call, the gradient written over the logits (as the
// graph calls it), with a loss scale that is not 1/N (gradient accumulation).
template <class Op>
void check_classifier_with_grad(const std::string& what) {
    Rng rng(test_seed());
    StageContext ctx;
    for (const ClassifierCase& s : classifier_cases<Op>()) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " V=" << s.V << " Vp=" << s.Vp);
        const Vec logits = classifier_logits(rng, s.N, s.V, s.Vp);
        const std::vector<int> targets = token_ids(rng, s.N, s.V);
        const float dloss = 1.0f / (3 * s.N);
        Vec losses(s.N), probs(size_t(s.N) * s.Vp), dlogits(probs.size());
        gpt::cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), s.N, s.V,
                                               s.Vp);
        gpt::cpu::softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, s.N, s.V, s.Vp);

        DeviceArray<Act> d_logits(logits);
        DeviceArray<int> d_targets(targets);
        DeviceArray<float> d_losses(s.N);
        DeviceScratch saved(Op::saved_bytes(s.N, s.Vp, sizeof(Act)));
        DeviceScratch scratch(Op::scratch_bytes(s.N, s.Vp, sizeof(Act)));
        Op::forward_backward(ctx, d_losses.data(), d_logits.data(), d_logits.data(), d_targets.data(), dloss, s.N,
                             s.V, s.Vp, saved.data(), scratch.data());
        sync_and_check(what + "forward_backward");
        EXPECT_TRUE(all_close(what + "losses", d_losses.download(), losses, kFp32Tol));
        EXPECT_TRUE(all_close(what + "dlogits, written over the logits", d_logits.download(), dlogits, kActTol));
    }
}

TEST_F(Slots, ClassifierWithGrad) { check_classifier_with_grad<Ops::ClassifierWithGrad>("ClassifierWithGrad "); }

// The benchmark-only variants of the slot (tests/bench/classifier_variants.cuh: from stage 04 on,
// the fused classifier with its row held in registers), checked as the stage's own. A stage
// without variants skips.
TEST_F(Slots, ClassifierWithGradBenchmarkVariants) {
    using Variants = typename gpt::bench::ClassifierWithGradVariants<Ops::ClassifierWithGrad>::type;
    check_each_variant<Variants>("its fused classifier", [](auto op) {
        using Op = decltype(op);
        check_classifier_with_grad<Op>(std::string(Op::label) + ": ");
    });
}

// ---- optimizer ------------------------------------------------------------------------------------

// An optimizer that does in one launch what another does a launch per tensor names that one
// (PerTensor: stage 04's FusedAdamW names stage 02's MixedPrecisionAdamW). Given the same state,
// gradients and norm, the two must give the same bits.
template <class Optimizer, class = void>
struct PerTensorOf {
    using type = void;  // nothing to compare with
};
template <class Optimizer>
struct PerTensorOf<Optimizer, std::void_t<typename Optimizer::PerTensor>> {
    using type = typename Optimizer::PerTensor;
};

// What an optimizer is given: a parameter layout, the shard it updates (ZeRO-1, train/parallel.h;
// the whole array with one process), the state it starts from, and each step's gradients.
struct AdamWProblem {
    gpt::ParamLayout layout;
    gpt::Shard shard;
    gpt::AdamWSettings settings;
    Vec params, m, v;  // the whole array's weights; the shard's moments
    std::vector<gpt::StepScalars> steps;
    std::vector<Vec> grads;  // each step's, of the whole array
};

// What an optimizer holds after a step: the master weights and the weights the graph reads (of
// the whole array), the shard's moments, and the gradients' sum of squares the step reported.
struct AdamWState {
    Vec master, m, v, act;
    double sum_squares;
};

// The problem's steps on a device optimizer of type Optimizer, and its state after each. With
// `sums`, step k updates with sums[k] as the gradients' sum of squares instead of its own (put in
// place between the norm and the update, where ZeRO-1 sums it over the processes): the norm is
// summed with atomics, in any order, and two runs may clip with norms a bit apart.
template <class Optimizer>
std::vector<AdamWState> run_adamw(const AdamWProblem& p, const std::vector<double>* sums = nullptr) {
    StageContext ctx;
    Optimizer optimizer(ctx, p.layout, p.shard);
    TestStage::copy_in(ctx, optimizer.master(), p.params.data(), p.params.size());
    TestStage::copy_in(ctx, optimizer.m(), p.m.data(), p.m.size());
    TestStage::copy_in(ctx, optimizer.v(), p.v.data(), p.v.size());
    optimizer.weights_changed(ctx);
    // The weights the forward pass reads: the master weights themselves in fp32 stages, their
    // act_t copy, rewritten by the same step, in mixed precision.
    if (!kSeparateActParams)
        EXPECT_EQ(static_cast<const void*>(optimizer.act_weights()), static_cast<const void*>(optimizer.master()));
    std::vector<AdamWState> states;
    for (size_t k = 0; k < p.steps.size(); ++k) {
        DeviceArray<float> d_grads(p.grads[k]);
        DeviceArray<gpt::StepScalars> d_step(std::vector<gpt::StepScalars>{p.steps[k]});
        DeviceArray<double> d_sum_squares(1);  // poisoned: the step must write it
        optimizer.step(ctx, d_grads.data(), p.settings, d_step.data(), d_sum_squares.data(), [&] {
            if (sums) TestStage::copy_in(ctx, d_sum_squares.data(), &(*sums)[k], 1);
        });
        sync_and_check("Optimizer::step");
        const size_t n = p.params.size(), count = p.m.size();
        states.push_back({download(ctx, optimizer.master(), n), download(ctx, optimizer.m(), count),
                          download(ctx, optimizer.v(), count), download(ctx, optimizer.act_weights(), n),
                          d_sum_squares.download_raw()[0]});
    }
    return states;
}

// Equal bit for bit (a NaN equals only the same NaN); the message names the first element that
// is not.
::testing::AssertionResult same_bits(const std::string& what, const Vec& actual, const Vec& expected) {
    if (actual.size() != expected.size())
        return ::testing::AssertionFailure() << what << ": " << actual.size() << " elements, expected "
                                             << expected.size();
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < actual.size(); ++i)
        if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0 && differ++ == 0) first = i;
    if (differ == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << differ << " of " << actual.size()
                                         << " elements differ, the first at " << first << ": " << actual[first]
                                         << ", expected " << expected[first];
}

struct AdamWCase {
    gpt::GPTConfig config;
    int vocab_multiple;
    float grad_size, grad_clip, weight_decay;
    int rank, world;  // the shard: rank's of world processes
};

// One case of Kernels.AdamW: the stage's optimizer against the CPU reference's, and against the
// optimizer it names as doing the same per tensor, if it names one.
template <class Optimizer>
void check_adamw(Rng& rng, const AdamWCase& c) {
    const gpt::ParamLayout layout(c.config, c.config.padded_vocab(c.vocab_multiple));
    const size_t n = layout.total();
    AdamWProblem p{layout, gpt::shard_of(n, c.rank, c.world), {}, {}, {}, {}, {{1e-2f, 1}, {3e-3f, 7}}, {}};
    SCOPED_TRACE(testing::Message() << "parameters " << n << ", shard [" << p.shard.begin << ", " << p.shard.end()
                                    << "), grad_clip " << c.grad_clip << ", weight_decay " << c.weight_decay);
    p.settings.grad_clip = c.grad_clip;
    p.settings.weight_decay = c.weight_decay;
    // Small weights, as after GPT-2's initialisation, so that one step changes them visibly.
    p.params = random_normal(rng, n, 0.05f, 0.01f);
    p.m = random_normal(rng, p.shard.count, 0.005f);
    p.v = random_uniform(rng, p.shard.count, 1e-6f, 2e-4f);  // a second moment is never negative
    for (size_t k = 0; k < p.steps.size(); ++k) p.grads.push_back(random_normal(rng, n, c.grad_size));
    const std::vector<AdamWState> states = run_adamw<Optimizer>(p);

    gpt::CpuBackend::Context cpu_ctx(gpt::stage_tag<gpt::CpuReference>);
    gpt::CpuAdamW reference(cpu_ctx, layout, p.shard);
    std::copy(p.params.begin(), p.params.end(), reference.master());
    std::copy(p.m.begin(), p.m.end(), reference.m());
    std::copy(p.v.begin(), p.v.end(), reference.v());
    for (size_t k = 0; k < p.steps.size(); ++k) {
        SCOPED_TRACE(testing::Message() << "lr " << p.steps[k].lr << ", t " << p.steps[k].t);
        const AdamWState& s = states[k];
        const Vec before(reference.master(), reference.master() + n);
        double sum_squares = 0.0;
        reference.step(cpu_ctx, p.grads[k].data(), p.settings, &p.steps[k], &sum_squares);
        EXPECT_TRUE(all_close("Optimizer::step gradient sum of squares", Vec{float(s.sum_squares)},
                              Vec{float(sum_squares)}, kFp32Tol));
        // The whole array: the weights outside the shard must be as they were.
        const Vec expected(reference.master(), reference.master() + n);
        EXPECT_TRUE(all_close("master weights", s.master, expected, kFp32Tol));
        // The step itself, so that an error in it cannot hide behind the size of the weights.
        Vec change(n), expected_change(n);
        for (size_t i = 0; i < n; ++i) {
            change[i] = s.master[i] - before[i];
            expected_change[i] = expected[i] - before[i];
        }
        EXPECT_TRUE(all_close("step (new - old master weights)", change, expected_change, kFp32Tol));
        const size_t count = p.shard.count;
        EXPECT_TRUE(all_close("first moment m", s.m, Vec(reference.m(), reference.m() + count), kFp32Tol));
        EXPECT_TRUE(all_close("second moment v", s.v, Vec(reference.v(), reference.v() + count), kFp32Tol));
        EXPECT_TRUE(all_close("weights the graph reads (act_weights)", s.act, rounded<Act>(expected), kActTol));
    }

    using PerTensor = typename PerTensorOf<Optimizer>::type;
    if constexpr (!std::is_void_v<PerTensor>) {
        SCOPED_TRACE("against the same update a launch per tensor, bit for bit");
        std::vector<double> sums;
        for (const AdamWState& s : states) sums.push_back(s.sum_squares);
        const std::vector<AdamWState> per_tensor = run_adamw<PerTensor>(p, &sums);
        for (size_t k = 0; k < p.steps.size(); ++k) {
            SCOPED_TRACE(testing::Message() << "t " << p.steps[k].t);
            EXPECT_TRUE(same_bits("master weights", states[k].master, per_tensor[k].master));
            EXPECT_TRUE(same_bits("first moment m", states[k].m, per_tensor[k].m));
            EXPECT_TRUE(same_bits("second moment v", states[k].v, per_tensor[k].v));
            EXPECT_TRUE(same_bits("act_weights", states[k].act, per_tensor[k].act));
        }
    }
}

// The stage's optimizer against the CPU reference's (CpuAdamW, common/cpu/reference_stage.h), on
// the same weights, moments and gradients: the squared gradient norm it reports, the fp32 master
// weights, m, v, and (mixed precision) the act_t copy. Two steps in a row with different learning
// rates and step counts: they must be read from device memory at every step, not remembered.
// Layouts of models with sizes that are not multiples of a block, one with a padded vocabulary;
// tensors that end off multiples of 4 (C = 9, 237: a 16-byte pack may hold two tensors' ends);
// one model of 2.3M parameters, several waves of threads on an H100 even in packs of 4; ZeRO-1
// shards that start at an odd element and at a multiple of 4. A stage whose optimizer names a
// per-tensor counterpart (stage 04's one-launch AdamW) is also checked against it, bit for bit.
TEST_F(Kernels, AdamW) {
    SCOPED_TRACE(adamw_trace());
    //                 maxT  V    L  H  C       vocab  grads  clip  decay  rank world
    const AdamWCase cases[] = {
        {gpt::GPTConfig{5, 67, 1, 3, 9}, 1, 0.01f, 1.0f, 0.1f, 0, 1},       // norm far below the clip: no clipping
        {gpt::GPTConfig{7, 1000, 2, 4, 36}, 64, 0.05f, 1.0f, 0.1f, 0, 1},   // norm above it: clipped
        {gpt::GPTConfig{7, 1000, 2, 4, 36}, 1, 0.05f, 0.0f, 0.0f, 0, 1},    // clipping and weight decay off
        {gpt::GPTConfig{5, 67, 1, 3, 9}, 1, 0.05f, 1.0f, 0.1f, 1, 3},       // shard [585, 1170)
        {gpt::GPTConfig{5, 67, 1, 3, 9}, 1, 0.05f, 1.0f, 0.1f, 4, 5},       // shard [1404, 1755)
        {gpt::GPTConfig{5, 67, 1, 3, 9}, 1, 0.05f, 1.0f, 0.1f, 584, 585},   // shard [1752, 1755): a tail only
        {gpt::GPTConfig{33, 999, 3, 3, 237}, 1, 0.01f, 1.0f, 0.1f, 0, 1},   // 2,276,385 parameters
        {gpt::GPTConfig{33, 999, 3, 3, 237}, 1, 0.01f, 1.0f, 0.1f, 1, 2},   // shard [1138193, 2276385)
    };
    Rng rng(test_seed());
    for (const AdamWCase& c : cases) check_adamw<typename Ops::Optimizer>(rng, c);
}

// ---- the stage's matmul arithmetic --------------------------------------------------------------

// Stage 00 promises fp32 matmuls, stage 01 TF32 tensor cores: the results differ by far less than
// any other test would notice, so this test builds inputs that tell them apart. Operands are
// 1 + a·2^-13 with a in {1, 2, 3}: exact in fp32, but TF32 keeps 10 mantissa bits and rounds each
// of them to 1 (to nearest and by truncation alike). The exact product of two operands needs 26
// bits. Summed over C = 768 terms, fp32 arithmetic stays within about 1e-6 of the exact result,
// while TF32 loses about 4·2^-13 ≈ 5e-4 of it, with the same sign for every element.
// Stages with bf16 operands get 1 + a·2^-7, exact in bf16, and only bf16 bounds are checked.
// TF32 is a permission, not an order: cuBLASLt may still pick a kernel without tensor cores, as it
// may for odd shapes its tensor-core kernels fit badly. So the shape here is a multiple of 128 in
// every dimension, on 256-byte-aligned memory, where TF32 kernels fit. The numerical flags of the
// algorithm cuBLASLt chose are printed, not judged: on an H100 with cuBLAS 13 they say FMA with
// TF32 inputs for a kernel whose results carry TF32 rounding, so the rounding is the evidence.
TEST_F(Matmul, UsesTheStagesMath) {
    std::string trace = std::string("stage ") + TestStage::name + " declares " + gpt::precision_name(kPrecision) +
                        " matmuls";
    if (kPrecision == gpt::Precision::TF32) trace += "; exercise stage01.tf32_compute_type: see docs/01_tf32.md#exercise";
    SCOPED_TRACE(trace);

    const int N = 512, C = 768, OC = 384;
    const double unit = std::ldexp(1.0, kPrecision == gpt::Precision::BF16 ? -7 : -13);
    Rng rng(test_seed());
    auto operands = [&](size_t n) {
        Vec v(n);
        for (float& x : v) x = static_cast<float>(1.0 + unit * double(1 + rng.below(3)));
        return v;
    };
    const Vec inp = operands(size_t(N) * C), weight = operands(size_t(OC) * C);
    // In double every product and every partial sum here is exact.
    std::vector<double> exact(size_t(N) * OC);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double sum = 0.0;
            for (int c = 0; c < C; ++c) sum += double(inp[size_t(n) * C + c]) * double(weight[size_t(o) * C + c]);
            exact[size_t(n) * OC + o] = sum;
        }

    StageContext ctx;
    DeviceArray<Act> d_inp(inp), d_weight(weight), d_out(exact.size());
    TestStage::Matmul::forward(ctx, d_out.data(), d_inp.data(), d_weight.data(), static_cast<const Act*>(nullptr), N,
                               C, OC);
    sync_and_check("Matmul::forward");
    const Vec out = d_out.download();

    // What cuBLASLt says about the algorithm it ran (0: it did not say, or the stage's matmul does
    // not go through the GemmContext).
    const uint64_t impl = ctx.gemm.last_algorithm().numerical_impl;
    const bool tensor_cores = (impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK) != 0;

    size_t unwritten = 0;
    double mean_rel = 0.0, max_rel = 0.0, err2 = 0.0, exact2 = 0.0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (gpt::test::is_poison(out[i])) ++unwritten;
        const double err = double(out[i]) - exact[i], rel = std::fabs(err) / exact[i];
        mean_rel += rel / out.size();
        if (!(rel <= max_rel)) max_rel = rel;  // a NaN sticks
        err2 += err * err;
        exact2 += exact[i] * exact[i];
    }
    ASSERT_EQ(unwritten, 0u) << "Matmul::forward left elements unwritten (test seed " << test_seed() << ")";
    const double rel_l2 = std::sqrt(err2 / exact2);

    // What the errors say about the arithmetic, in the tolerance table's terms.
    const gpt::test::Tolerance fp32 = gpt::test::kFp32;
    const gpt::test::Tolerance tf32 = gpt::test::kTf32;
    const gpt::test::Tolerance bf16 = gpt::test::kBf16;
    const char* detected = !(mean_rel <= bf16.rtol)   ? "worse than bf16 (a wrong result?)"
                           : !(mean_rel <= tf32.rtol) ? "bf16-like"
                           : !(mean_rel <= fp32.rtol) ? "TF32 (operands rounded to 10 mantissa bits)"
                                                      : "fp32 (operands kept whole)";
    std::ostringstream report;
    report << "the matmul computed with " << detected << " math: mean relative error " << mean_rel << ", largest "
           << max_rel << ", relative L2 " << rel_l2 << " against the exact result; cuBLASLt ran "
           << (impl == 0 ? "an algorithm it did not describe"
                         : tensor_cores ? "a tensor-core kernel" : "a kernel without tensor cores")
           << (impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32 ? " with TF32 inputs" : "") << " (numerical flags 0x"
           << std::hex << impl << std::dec << "); the stage declares "
           << gpt::precision_name(kPrecision) << " (test seed " << test_seed() << ")";
    switch (kPrecision) {
        case gpt::Precision::FP32:
            EXPECT_LE(max_rel, fp32.rtol) << report.str();
            break;
        case gpt::Precision::TF32:
            // More error than fp32 arithmetic can make (tensor cores are in use), within TF32's.
            EXPECT_GT(mean_rel, fp32.rtol) << report.str();
            EXPECT_LE(max_rel, tf32.rtol) << report.str();
            // Not asserted: on an H100 with cuBLAS 13, the flags of the algorithm that produced these
            // TF32-rounded results say FMA with TF32 inputs. The rounding above is the evidence.
            if (impl != 0 && !tensor_cores) std::cout << "note: " << report.str() << "\n";
            break;
        case gpt::Precision::BF16:
            EXPECT_LE(max_rel, bf16.rtol) << report.str();
            break;
    }
    EXPECT_LE(rel_l2, kMatmulTol.rel_l2) << report.str();
}

// ---- padded copies (common/cuda/gemm.cuh) ---------------------------------------------------------
//
// A shape cuBLASLt has no algorithm for runs on copies of its operands padded to 16-byte-aligned
// rows. Here every matmul of one context is made to take that path, on odd sizes and leading
// dimensions, and must give what the direct path gives (and what the CPU gives): the linear
// layers as the model calls them, then batched strided products like attention's.

// A context whose matmuls all run on padded copies.
struct PaddedContext : StageContext {
    PaddedContext() { gemm.force_padded_copies(true); }
};

TEST_F(Matmul, PaddedCopiesMatchTheDirectPath) {
    Rng rng(test_seed());
    StageContext direct;
    PaddedContext padded;
    for (const MatmulCase& s : kMatmulCases) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC);
        const MatmulInputs in(rng, s);
        const Vec dout = rounded<Act>(random_normal(rng, size_t(s.N) * s.OC));
        const MatmulBackwardExpected expected(rng, s, in, dout, true);
        Vec out_expected(size_t(s.N) * s.OC);
        gpt::cpu::matmul_forward(out_expected.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C, s.OC);

        DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias), d_dout(dout);
        struct Outputs {
            DeviceArray<Act> out, dinp;
            DeviceArray<float> dweight, dbias;
        };
        // The forward (C written, beta 0) and the backward: dinp (beta 0), dweight (added to: C read,
        // beta 1, fp32 while the operands are Act).
        auto run = [&](Ctx& ctx) {
            Outputs o{DeviceArray<Act>(out_expected.size()), DeviceArray<Act>(expected.dinp.size()),
                      DeviceArray<float>(expected.dweight_start), DeviceArray<float>(expected.dbias_start)};
            TestStage::Matmul::forward(ctx, o.out.data(), d_inp.data(), d_weight.data(), d_bias.data(), s.N, s.C, s.OC);
            TestStage::Matmul::backward(ctx, o.dinp.data(), o.dweight.data(), o.dbias.data(), d_dout.data(),
                                        d_inp.data(), d_weight.data(), s.N, s.C, s.OC);
            sync_and_check("Matmul::forward and backward");
            return o;
        };
        const Outputs a = run(direct), b = run(padded);
        const Vec out = a.out.download(), dinp = a.dinp.download(), dweight = a.dweight.download();
        EXPECT_TRUE(all_close("forward out, direct", out, out_expected, kMatmulTol));
        EXPECT_TRUE(all_close("forward out, padded vs direct", b.out.download(), out, kMatmulTol));
        EXPECT_TRUE(all_close("backward dinp, direct", dinp, expected.dinp, kMatmulTol));
        EXPECT_TRUE(all_close("backward dinp, padded vs direct", b.dinp.download(), dinp, kMatmulTol));
        EXPECT_TRUE(all_close("backward dweight (added to), direct", dweight, expected.dweight, kMatmulTol));
        EXPECT_TRUE(
            all_close("backward dweight (added to), padded vs direct", b.dweight.download(), dweight, kMatmulTol));
        EXPECT_TRUE(all_close("backward dbias, padded vs direct", b.dbias.download(), a.dbias.download(), kFp32Tol));
    }
}

// Batched, strided, every size and leading dimension odd: each operand is a view into a wider
// array (rows further apart than they are long, gaps between the matrices), which the result must
// leave as it was.
TEST_F(Matmul, PaddedCopiesOfBatchedStridedMatrices) {
    struct Case {
        bool trans_a, trans_b;
        int M, N, K, batch;
        float alpha, beta;
    };
    const Case cases[] = {
        {false, true, 65, 33, 9, 3, 0.125f, 0.0f},  // attention's q·kᵀ at an odd T and head size
        {false, false, 65, 9, 65, 3, 1.0f, 0.0f},   // att·v
        {true, false, 9, 33, 65, 2, 1.0f, 0.5f},    // Aᵀ, and C read (beta != 0)
        {true, true, 17, 63, 31, 1, 1.0f, 1.0f},    // not batched, added to C
    };
    // Row-major matrices of rows x cols, rows ld elements apart (the next odd number past cols),
    // matrices stride elements apart (3 elements of gap).
    struct View {
        int rows, cols, batch;
        long long ld, stride;
        View(int r, int c, int b) : rows(r), cols(c), batch(b), ld(c + (c % 2 ? 2 : 1)), stride(r * ld + 3) {}
        size_t size() const { return size_t(stride) * batch; }
        size_t at(int b, int r, int c) const { return size_t(b) * stride + size_t(r) * ld + c; }
        Vec elements(const Vec& all) const {  // the matrices' elements, without the gaps
            Vec v;
            for (int b = 0; b < batch; ++b)
                for (int r = 0; r < rows; ++r)
                    for (int c = 0; c < cols; ++c) v.push_back(all[at(b, r, c)]);
            return v;
        }
    };
    Rng rng(test_seed());
    StageContext direct;
    PaddedContext padded;
    for (const Case& s : cases) {
        SCOPED_TRACE(testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K << " batch " << s.batch
                                        << (s.trans_a ? " Aᵀ" : "") << (s.trans_b ? " Bᵀ" : "") << " beta " << s.beta);
        const View va(s.trans_a ? s.K : s.M, s.trans_a ? s.M : s.K, s.batch);
        const View vb(s.trans_b ? s.N : s.K, s.trans_b ? s.K : s.N, s.batch);
        const View vc(s.M, s.N, s.batch);
        const Vec A = rounded<Act>(random_normal(rng, va.size())), B = rounded<Act>(random_normal(rng, vb.size()));
        // The gaps hold values that must survive; with beta 0 the matrices hold NaN, which must
        // be neither read nor left behind.
        Vec C0 = rounded<Act>(random_normal(rng, vc.size(), 1.0f, 0.5f));
        Vec expected = C0;
        for (int b = 0; b < s.batch; ++b)
            for (int m = 0; m < s.M; ++m)
                for (int n = 0; n < s.N; ++n) {
                    double sum = 0.0;
                    for (int k = 0; k < s.K; ++k)
                        sum += double(A[s.trans_a ? va.at(b, k, m) : va.at(b, m, k)]) *
                               B[s.trans_b ? vb.at(b, n, k) : vb.at(b, k, n)];
                    float& c = C0[vc.at(b, m, n)];
                    if (s.beta == 0.0f) c = std::nanf("");
                    const double start = s.beta == 0.0f ? 0.0 : s.beta * double(c);
                    expected[vc.at(b, m, n)] = static_cast<float>(s.alpha * sum + start);
                }

        DeviceArray<Act> d_A(A), d_B(B);
        auto run = [&](Ctx& ctx) {
            DeviceArray<Act> d_C(C0);
            ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, s.trans_a, s.trans_b, s.M, s.N, s.K, s.alpha, d_A.data(),
                          int(va.ld), d_B.data(), int(vb.ld), s.beta, d_C.data(), int(vc.ld), s.batch, va.stride,
                          vb.stride, vc.stride);
            sync_and_check("GemmContext::gemm");
            return d_C.download();
        };
        const Vec by_direct = run(direct), by_padded = run(padded);
        EXPECT_TRUE(padded.gemm.last_algorithm().padded) << "the padded context did not use padded copies";
        EXPECT_TRUE(all_close("direct", vc.elements(by_direct), vc.elements(expected), kMatmulTol));
        EXPECT_TRUE(all_close("padded vs direct", vc.elements(by_padded), vc.elements(by_direct), kMatmulTol));
        size_t gaps_changed = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
            const size_t in_matrix = i % vc.stride;  // offset within its matrix's stride
            const bool in_gap = in_matrix >= size_t(vc.rows * vc.ld) || in_matrix % vc.ld >= size_t(vc.cols);
            if (in_gap && (by_direct[i] != C0[i] || by_padded[i] != C0[i])) ++gaps_changed;
        }
        EXPECT_EQ(gaps_changed, 0u) << "elements outside the matrices were written";
    }
    EXPECT_GT(padded.gemm.scratch_bytes(), 0u) << "padded copies without scratch memory";
}

// cuBLASLt's epilogues (common/cuda/gemm.cuh, used by stage 04) on their own, for every stage's
// element type and arithmetic: a bias added, bias + GELU keeping the GELU's input, GELU's
// derivative applied to a product, a bias gradient summed beside a weight gradient. At a shape
// where cuBLASLt's bf16 kernels fit (multiples of 128, aligned memory) a bf16 stage must get
// every one of them, or stage 04 would silently run its fallback kernels; an fp32 or TF32 stage
// may be refused (gemm() returns false), and its results are printed where they differ, not
// judged: no such stage uses epilogues. The GELU is compared with the tanh approximation the
// model uses.
TEST_F(Matmul, EpiloguesMatchTheCpu) {
    using gpt::cuda::Epilogue;
    Rng rng(test_seed());
    StageContext ctx;
    const MatmulCase s{256, 128, 384};
    const size_t NOC = size_t(s.N) * s.OC, NC = size_t(s.N) * s.C;
    const MatmulInputs in(rng, s);
    const Vec dout = rounded<Act>(random_normal(rng, NOC));
    const Vec pre_in = rounded<Act>(random_normal(rng, NC, 2.0f, -0.3f));  // the GELU's input, for DGELU
    // Judged where stage 04 relies on them (bf16); elsewhere what happened is printed.
    const bool judged = std::is_same_v<Act, gpt::bf16>;
    auto ran = [&](bool ok, const char* what) {
        if (!ok && judged) ADD_FAILURE() << "cuBLASLt has no " << what << " epilogue for this bf16 shape";
        if (!ok && !judged) std::printf("note: cuBLASLt has no %s epilogue for this stage's matmuls (not judged)\n", what);
        return ok;
    };
    auto check = [&](const testing::AssertionResult& r) {
        if (judged) EXPECT_TRUE(r);
        else if (!r) std::printf("note (not judged in a stage without epilogues): %s\n", r.message());
    };
    const DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias), d_dout(dout), d_pre_in(pre_in);

    Vec product(NOC);  // inp · weightᵀ + bias
    gpt::cpu::matmul_forward(product.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C, s.OC);
    {
        Epilogue e;
        e.kind = Epilogue::kBias;
        e.bias = d_bias.data();
        DeviceArray<Act> d_out(NOC);
        if (ran(ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, true, s.N, s.OC, s.C, 1.0f, d_inp.data(), s.C,
                              d_weight.data(), s.C, 0.0f, d_out.data(), s.OC, 1, 0, 0, 0, e),
                "BIAS")) {
            sync_and_check("gemm with a bias");
            check(all_close("BIAS out", d_out.download(), product, kMatmulTol));
        }
    }
    {
        Vec gelu(NOC);
        gpt::cpu::gelu_forward(gelu.data(), product.data(), NOC);
        Epilogue e;
        e.kind = Epilogue::kGeluAuxBias;
        e.bias = d_bias.data();
        DeviceArray<Act> d_out(NOC), d_pre(NOC);
        e.aux = d_pre.data();
        e.aux_ld = s.OC;
        if (ran(ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, true, s.N, s.OC, s.C, 1.0f, d_inp.data(), s.C,
                              d_weight.data(), s.C, 0.0f, d_out.data(), s.OC, 1, 0, 0, 0, e),
                "GELU_AUX_BIAS")) {
            sync_and_check("gemm with bias and GELU");
            check(all_close("GELU_AUX_BIAS pre-activation", d_pre.download(), product, kMatmulTol));
            check(all_close("GELU_AUX_BIAS out (tanh GELU)", d_out.download(), gelu, kMatmulTol));
        }
    }
    {
        Vec dinp(NC), dpre(NC), unused_dw(size_t(s.OC) * s.C, 0.0f);
        gpt::cpu::matmul_backward(dinp.data(), unused_dw.data(), nullptr, dout.data(), in.inp.data(),
                                  in.weight.data(), s.N, s.C, s.OC);
        gpt::cpu::gelu_backward(dpre.data(), pre_in.data(), dinp.data(), NC);
        Epilogue e;
        e.kind = Epilogue::kDGelu;
        e.aux = const_cast<Act*>(d_pre_in.data());
        e.aux_ld = s.C;
        DeviceArray<Act> d_dpre(NC);
        if (ran(ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, false, s.N, s.C, s.OC, 1.0f, d_dout.data(), s.OC,
                              d_weight.data(), s.C, 0.0f, d_dpre.data(), s.C, 1, 0, 0, 0, e),
                "DGELU")) {
            sync_and_check("gemm with GELU's derivative");
            check(all_close("DGELU dpre", d_dpre.download(), dpre, kMatmulTol));
        }
    }
    {
        const MatmulBackwardExpected expected(rng, s, in, dout, true);
        Vec dbias = zeros(s.OC);  // written, not added to
        for (int n = 0; n < s.N; ++n)
            for (int c = 0; c < s.OC; ++c) dbias[c] += dout[size_t(n) * s.OC + c];
        Epilogue e;
        e.kind = Epilogue::kBGradB;
        DeviceArray<float> d_dweight(expected.dweight_start), d_dbias(s.OC);  // d_dbias poisoned
        e.bias_grad = d_dbias.data();
        if (ran(ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, true, false, s.OC, s.C, s.N, 1.0f, d_dout.data(), s.OC,
                              d_inp.data(), s.C, 1.0f, d_dweight.data(), s.C, 1, 0, 0, 0, e),
                "BGRADB")) {
            sync_and_check("gemm with a bias gradient");
            check(all_close("BGRADB dweight (added to)", d_dweight.download(), expected.dweight, kMatmulTol));
            check(all_close("BGRADB dbias (written)", d_dbias.download(), dbias, kFp32Tol));
        }
    }
}

// The algorithm a shape's first call chooses by timing its candidates (common/cuda/gemm.cuh)
// computes what the heuristic's first choice computes, within the stage's matmul tolerance, and
// the timing itself leaves no trace: it runs the product several times, so a call that adds to C
// (beta != 0), or that writes what it reads, must not be timed, and one that is timed must write
// the same results as one that is not. (Nor is a call that writes what it reads: not tested, as
// such a product is undefined anyway.) Shapes of the model and an odd one, with and without a
// bias epilogue, each checked against the CPU as well. In every stage, with the stage's arithmetic,
// whether or not its policy times (kTimeMatmuls): the test asks a context to time, whatever the
// policy, so that the timing is checked for fp32 and TF32 products too.
TEST_F(Matmul, FastestAlgorithmMatchesTheHeuristicsFirst) {
    using gpt::cuda::Epilogue;
    Rng rng(test_seed());
    const MatmulCase shapes[] = {{384, 256, 768}, {256, 1024, 256}, {131, 96, 200}};
    const bool bf16 = std::is_same_v<Act, gpt::bf16>;
    int timed_shapes = 0;
    for (const MatmulCase& s : shapes) {
        SCOPED_TRACE(testing::Message() << "N=" << s.N << " C=" << s.C << " OC=" << s.OC);
        const size_t NOC = size_t(s.N) * s.OC;
        const MatmulInputs in(rng, s);
        const Vec dout = rounded<Act>(random_normal(rng, NOC));
        Vec product(NOC);  // inp · weightᵀ + bias
        gpt::cpu::matmul_forward(product.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C, s.OC);
        const MatmulBackwardExpected expected(rng, s, in, dout, false);
        const DeviceArray<Act> d_inp(in.inp), d_weight(in.weight), d_bias(in.bias), d_dout(dout);

        // Every call twice: by a context that times candidates and by one that keeps the first.
        StageContext timing, first;
        timing.gemm.time_candidates(true);  // whatever GPT_MATMUL_TIMING says (the sanitizer runs set off)
        first.gemm.time_candidates(false);
        auto forward = [&](StageContext& ctx, bool with_bias) {
            DeviceArray<Act> d_out(NOC);  // poisoned
            Epilogue e;
            e.kind = with_bias ? Epilogue::kBias : Epilogue::kNone;
            e.bias = with_bias ? d_bias.data() : nullptr;
            const bool ran = ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, true, s.N, s.OC, s.C, 1.0f,
                                           d_inp.data(), s.C, d_weight.data(), s.C, 0.0f, d_out.data(), s.OC, 1, 0,
                                           0, 0, e);
            sync_and_check("gemm");
            return ran ? d_out.download() : Vec();
        };
        for (const bool with_bias : {false, true}) {
            SCOPED_TRACE(with_bias ? "with a bias epilogue" : "plain product");
            const Vec by_timing = forward(timing, with_bias), by_first = forward(first, with_bias);
            const auto& chosen = timing.gemm.last_algorithm();
            EXPECT_EQ(first.gemm.last_algorithm().timed, 0) << "time_candidates(false) timed candidates";
            if (by_first.empty() || by_timing.empty()) {
                EXPECT_EQ(by_first.empty(), by_timing.empty()) << "one context ran the epilogue, the other did not";
                continue;  // no epilogue at this shape (Matmul.EpiloguesMatchTheCpu judges where one must exist)
            }
            if (chosen.candidates > 1 && !chosen.padded) {
                EXPECT_GT(chosen.timed, 0) << "a call with beta = 0 was not timed";
                ++timed_shapes;
            }
            Vec expected_out(NOC);
            gpt::cpu::matmul_forward(expected_out.data(), in.inp.data(), in.weight.data(),
                                     with_bias ? in.bias.data() : nullptr, s.N, s.C, s.OC);
            EXPECT_TRUE(all_close("fastest vs the CPU", by_timing, expected_out, kMatmulTol));
            EXPECT_TRUE(all_close("fastest vs the heuristic's first", by_timing, by_first, kMatmulTol));
        }

        // dweight += doutᵀ · inp: first met adding to C, so never timed, and added to once.
        {
            DeviceArray<float> d_dweight(expected.dweight_start);
            timing.gemm.gemm(timing.stream, timing.matmul_compute, true, false, s.OC, s.C, s.N, 1.0f, d_dout.data(),
                             s.OC, d_inp.data(), s.C, 1.0f, d_dweight.data(), s.C);
            sync_and_check("gemm adding to C");
            EXPECT_EQ(timing.gemm.last_algorithm().timed, 0) << "a call that adds to C was timed";
            EXPECT_TRUE(all_close("dweight added to once", d_dweight.download(), expected.dweight, kMatmulTol));
        }
    }
    if (bf16) EXPECT_GT(timed_shapes, 0) << "no shape had several candidates to time";
}

// A stage's own context times candidates exactly when its policy says so (kTimeMatmuls: stage 04
// on, the counterpart of torch.compile's max-autotune; stages 00-03 take the heuristic's first
// choice, as PyTorch eager does), unless GPT_MATMUL_TIMING=off; and the banner says which.
TEST_F(Matmul, ChoosesAlgorithmsAsThePolicySays) {
    const bool timing = TestStage::kTimeMatmuls && gpt::cuda::matmul_timing_on();
    Rng rng(test_seed());
    const MatmulCase s{384, 256, 768};
    const MatmulInputs in(rng, s);
    const DeviceArray<Act> d_inp(in.inp), d_weight(in.weight);
    StageContext ctx;
    EXPECT_EQ(ctx.gemm.times_candidates(), timing);
    DeviceArray<Act> d_out(size_t(s.N) * s.OC);
    ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, true, s.N, s.OC, s.C, 1.0f, d_inp.data(), s.C,
                  d_weight.data(), s.C, 0.0f, d_out.data(), s.OC);  // beta = 0: a call that may be timed
    sync_and_check("gemm");
    const auto& a = ctx.gemm.last_algorithm();
    if (!timing) EXPECT_EQ(a.timed, 0) << "a stage whose policy does not time matmuls timed candidates";
    if (timing && a.candidates > 1 && !a.padded) EXPECT_GT(a.timed, 0) << "kTimeMatmuls is on, nothing was timed";
    const std::string banner = gpt::describe_policy<TestStage>();
    EXPECT_NE(banner.find(TestStage::kTimeMatmuls ? "kTimeMatmuls on" : "kTimeMatmuls off"), std::string::npos)
        << banner;
}

// ---- the whole model ------------------------------------------------------------------------------

// One forward and backward of the reference case (tests/reference: the micro model on one
// batch), against the fp32 CPU reference: the loss and each of the 16 gradient tensors.
TEST_F(Model, Step0LossAndGradients) {
    SCOPED_TRACE(model_trace());
    const double tol = gpt::test::model_rel_l2(kPrecision);
    const gpt::test::Step0 gpu = gpt::test::reference_step0<TestStage>();
    const gpt::test::Step0 cpu = gpt::test::reference_step0<gpt::CpuReference>();
    EXPECT_TRUE(std::isfinite(gpu.loss)) << "loss " << gpu.loss;
    EXPECT_LE(std::fabs(double(gpu.loss) - cpu.loss), tol * std::fabs(cpu.loss))
        << "step-0 loss " << gpu.loss << " vs the CPU reference's " << cpu.loss;
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    const gpt::ParamLayout layout(gpt::test::overfit_case().config);
    for (int t = 0; t < gpt::kNumParamTensors; ++t) {
        const auto begin = layout.offset[t], end = begin + layout.size[t];
        const Vec mine(gpu.grads.begin() + begin, gpu.grads.begin() + end);
        const Vec reference(cpu.grads.begin() + begin, cpu.grads.begin() + end);
        EXPECT_TRUE(gpt::test::rel_l2_close(std::string("step-0 gradient of ") + gpt::ParamLayout::name(t), mine,
                                            reference, tol));
    }
}

// The reference case trained for its 20 steps, with the settings of the committed PyTorch run,
// against that run's losses.
TEST_F(Model, LossCurveMatchesPyTorch) {
    SCOPED_TRACE(model_trace());
    const std::string path = gpt::test::committed_curve_path();
    ASSERT_TRUE(std::filesystem::exists(path)) << "no committed reference curve at " << path;
    const gpt::test::ReferenceRun pytorch = gpt::test::load_reference_run(path);
    const gpt::test::Curve curve = gpt::test::reference_curve<TestStage>(gpt::test::load_reference_settings(path));
    EXPECT_TRUE(gpt::test::curves_close(std::string(TestStage::name) + " loss curve vs PyTorch (" + path + ")",
                                        curve.losses, pytorch.losses, gpt::test::model_rel_l2(kPrecision)));
}

// GPT-2 124M at full size, B = 16, T = 1024, 30 steps on the default corpus, against the curve
// PyTorch made on a GPU in true fp32 (tests/reference/README.md, "d12_brown_fp32.json"): what the
// micro model cannot show (cuBLAS at real shapes, 50257 logits per row, 12 layers).
TEST_F(Model, FullSizeCurveMatchesPyTorch) {
    SCOPED_TRACE(model_trace());
    const std::string path = gpt::test::committed_full_size_curve_path();
    ASSERT_TRUE(std::filesystem::exists(path)) << "no committed full-size curve at " << path
                                               << " (tests/gpu_check.sh --phase curve makes it)";
    const std::string data = gpt::test::default_corpus_dir();
    ASSERT_FALSE(gpt::find_shards(data, "train").empty())
        << "no train shards in " << data << " (make the default corpus: cmake --build <build dir> --target data)";
    const gpt::test::ReferenceRun pytorch = gpt::test::load_reference_run(path);
    const gpt::test::Curve curve =
        gpt::test::full_size_curve<TestStage>(gpt::test::load_reference_settings(path), data);
    EXPECT_TRUE(gpt::test::curves_close(std::string(TestStage::name) + " d12 loss curve vs PyTorch (" + path + ")",
                                        curve.losses, pytorch.losses, gpt::test::model_rel_l2(kPrecision)));
}

// All device memory is allocated when the model is built, and a training step allocates nothing,
// not even for a moment (an allocation synchronises the device, fragments memory and cannot be
// recorded in a CUDA Graph). The exceptions are what only a first run can know, so they happen in
// the first step, the warm-up: each matmul shape chooses its cuBLASLt algorithm and, if it needs
// padded copies, allocates their scratch (cuda/gemm.cuh); CUDA loads a kernel's code on its first
// launch; a library may set itself up on first use.
//
// Two measures, each after a synchronisation:
//  - MemoryStats: every DeviceBuffer, and the peak within a step (memory allocated and freed again);
//  - free device memory (cudaMemGetInfo): also what libraries (cuBLAS, the CUDA Graph runtime) and
//    plain cudaMalloc calls take. The driver hands memory out in pages (typically 2 MiB), so small
//    allocations may fit in a page already in use and not show; compared exactly, as any change
//    means a new page.
// Step 1 (warm-up): MemoryStats may grow by the matmuls' padded-copy scratch and nothing else;
//   free memory is not judged.
// Step 2: where the stage records its step (kCaptureStep), it is recorded and replayed for the first
//   time here. Instantiating a CUDA Graph puts the executable graph in device memory, which is
//   legitimate once per recording, so only MemoryStats judges this step; otherwise it is an ordinary
//   step and free memory must not change.
// Step 3: an ordinary step (or a replay): neither measure may change.
// Free memory is counted for the whole GPU, so this test must have the GPU to itself: another
// process allocating meanwhile makes it fail (CTest: RUN_SERIAL).
// Generation with the key/value cache (GPT::forward_cached) gives the logits a full forward of
// the same tokens gives: a prompt of 9 tokens, then one token at a time up to 23. The two
// differ only in the attention kernel (the stage's, or the cached one), so the bound is the
// model's.
TEST_F(Model, CachedGenerationMatchesTheFullForward) {
    SCOPED_TRACE(model_trace());
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    Rng rng(test_seed());
    const int T = std::min(23, c.T);
    const std::vector<int> tokens = token_ids(rng, T, c.config.vocab_size);
    gpt::GPT<TestStage> model(c.config, 1, c.T);
    model.set_parameters(c.params);
    model.forward(tokens.data(), nullptr, 1, T);
    Vec expected, actual;
    for (int t = 0; t < T; ++t) {
        const Vec row = model.logits_at(0, t);
        expected.insert(expected.end(), row.begin(), row.end());
    }
    const int prompt = std::min(9, T);
    model.forward_cached(tokens.data(), prompt, 0);
    for (int t = 0; t < prompt; ++t) {
        const Vec row = model.logits_at(0, t);
        actual.insert(actual.end(), row.begin(), row.end());
    }
    for (int t = prompt; t < T; ++t) {
        model.forward_cached(tokens.data() + t, 1, t);
        const Vec row = model.logits_at(0, 0);
        actual.insert(actual.end(), row.begin(), row.end());
    }
    sync_and_check("forward_cached");
    EXPECT_TRUE(gpt::test::rel_l2_close("logits, cached generation vs full forward", actual, expected,
                                        gpt::test::model_rel_l2(kPrecision)));
}

TEST_F(Model, AllocatesOnlyOnce) {
    using gpt::cuda::MemoryStats;
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<TestStage> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    model.synchronize();
    const size_t built = MemoryStats::current().load();
    // Restart the high-water mark at what the model holds, so that memory allocated and freed
    // again within a step shows up too.
    MemoryStats::peak() = built;
    auto free_device_memory = [] {
        CUDA_CHECK(cudaDeviceSynchronize());
        size_t free = 0, total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free, &total));
        return free;
    };
    const gpt::AdamWSettings adamw{};
    const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
    size_t held = built, free_before = 0;
    for (int t = 1; t <= 3; ++t) {
        const bool records = TestStage::kCaptureStep && t == 2;
        SCOPED_TRACE(testing::Message() << "step " << t
                                        << (t == 1 ? " (warm-up)" : records ? " (recorded as a CUDA Graph)" : ""));
        model.train_step(batch, c.B, c.T, 1.0f / float(c.B * c.T), adamw, 1e-3f, t);
        sync_and_check("training step " + std::to_string(t));
        const size_t free_after = free_device_memory();
        if (t == 1) held = built + model.context().gemm.scratch_bytes();
        EXPECT_EQ(MemoryStats::current().load(), held)
            << "device memory held after step " << t << " (the model was built with " << built << " bytes)";
        EXPECT_EQ(MemoryStats::peak().load(), held) << "peak device memory during step " << t;
        if (t > 1 && !records)
            EXPECT_EQ(free_after, free_before)
                << "free device memory changed by " << (static_cast<long long>(free_after) - (long long)free_before)
                << " bytes during step " << t
                << ": something allocated outside DeviceBuffer (a library, a CUDA Graph, a plain cudaMalloc), "
                   "or another process shares this GPU";
        free_before = free_after;
    }
}

// The test programs (GPT_POISON_FRESH_DEVICE_MEMORY, stages/CMakeLists.txt) fill every fresh
// device allocation with 0xFF bytes, so that a kernel, or a workshop exercise's stub, that leaves
// the model's buffers unwritten fails whatever cudaMalloc returned (common/cuda/buffer.cuh): a
// fresh buffer must read as NaN (fp32, bf16) and -1 (int). 1001 elements: not a multiple of
// anything a memset could round to.
TEST_F(Model, PoisonedDeviceMemoryReadsAsNaN) {
    ASSERT_TRUE(gpt::cuda::kPoisonFreshDeviceMemory)
        << "the GPU test programs are compiled with GPT_POISON_FRESH_DEVICE_MEMORY (stages/CMakeLists.txt)";
    const size_t n = 1001;
    gpt::cuda::DeviceBuffer<float> f32(n);
    gpt::cuda::DeviceBuffer<gpt::bf16> b16(n);
    gpt::cuda::DeviceBuffer<int> i32(n);
    std::vector<float> f(n);
    std::vector<gpt::bf16> b(n);
    std::vector<int> i(n);
    CUDA_CHECK(cudaMemcpy(f.data(), f32.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), b16.data(), n * sizeof(gpt::bf16), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(i.data(), i32.data(), n * sizeof(int), cudaMemcpyDeviceToHost));
    size_t not_poisoned = 0;
    for (size_t k = 0; k < n; ++k)
        not_poisoned += !std::isnan(f[k]) + !std::isnan(gpt::to_float(b[k])) + (i[k] != -1);
    EXPECT_EQ(not_poisoned, 0u) << "of " << 3 * n << " freshly allocated elements (fp32, bf16, int)";
}

// The trainer refuses a run that would not fit from GPT::memory_needed() (train/memory.h): it
// must be exactly what the model allocates, and DeviceBuffer counts every byte of that. Shapes
// that are not tile multiples, several micro-batches of staging, and a process of several with
// ZeRO-1 (rank 2 of 3: the last shard, which is short).
template <class S>
void expect_estimate_is_allocation(int B, int T, int micro_batches) {
    using gpt::cuda::MemoryStats;
    const gpt::GPTConfig config = gpt::config_by_name("tiny");
    typename S::Parallel parallel;
    SCOPED_TRACE(testing::Message() << B << " x " << T << ", " << micro_batches << " micro-batches, "
                                    << parallel.describe() << (parallel.shards_optimizer() ? ", ZeRO-1" : ""));
    const auto need = gpt::GPT<S>::memory_needed(config, B, T, micro_batches, &parallel);
    const size_t before = MemoryStats::current().load();
    gpt::GPT<S> model(config, B, T, micro_batches, &parallel);
    EXPECT_EQ(MemoryStats::current().load() - before, need.buffers);
}

TEST_F(Model, MemoryEstimateIsWhatTheModelAllocates) {
    using One = gpt::test::AsProcess<TestStage, 0, 1, 0>;
    expect_estimate_is_allocation<One>(3, 65, 1);
    expect_estimate_is_allocation<One>(8, 128, 4);
    expect_estimate_is_allocation<gpt::test::AsProcess<TestStage, 2, 3, 1>>(3, 65, 2);
}

// A run whose batch was not given and does not fit the GPU splits it into the fewest
// micro-batches that fit (train/loop.h, fit_default_batch), from the same estimate: here under a
// GPT_MEMORY_LIMIT, which lowers the device's memory (the model's), not the host's.
TEST_F(Model, DefaultBatchSplitsToFitTheDevice) {
    using One = gpt::test::AsProcess<TestStage, 0, 1, 0>;
    const gpt::GPTConfig config = gpt::config_by_name("tiny");
    const int T = 128;
    const auto device_need = [&](int B, int micro_batches) {
        const auto [one, two] = gpt::memory_per_batch<One>(config, T, micro_batches, nullptr);
        return one.device + (two.device - one.device) * size_t(B - 1);
    };
    ASSERT_LT(device_need(16, 1), One::free_device_memory()) << "this GPU has too little free memory for the test";
    const char* saved = std::getenv("GPT_MEMORY_LIMIT");
    const std::string restore = saved ? saved : "";
    const auto split = [&](size_t limit) {
        setenv("GPT_MEMORY_LIMIT", std::to_string(limit).c_str(), 1);
        return gpt::fewest_micro_batches_that_fit<One>(config, 16, T, 1);
    };
    EXPECT_EQ(split(device_need(16, 1)), 1);
    EXPECT_EQ(split(device_need(16, 1) - 1), 2);  // 8 x 2
    EXPECT_EQ(split(device_need(4, 4) - 1), 8);   // 2 x 8
    EXPECT_EQ(split(device_need(1, 16) - 1), 0);  // not even one sequence
    setenv("GPT_MEMORY_LIMIT", std::to_string(device_need(16, 1) - 1).c_str(), 1);
    const gpt::MemoryNeed available = gpt::available_memory<One>();
    EXPECT_EQ(available.device, device_need(16, 1) - 1);
    EXPECT_GT(available.host, device_need(16, 1)) << "the limit lowered the host's memory too";
    if (saved) setenv("GPT_MEMORY_LIMIT", restore.c_str(), 1);
    else unsetenv("GPT_MEMORY_LIMIT");
}

// The optimizer updates fp32 master weights: a step far smaller than bf16's resolution (a
// weight of 0.02 has bf16 neighbours 1.2e-4 apart, a weight of 1.0 7.8e-3 apart; this step is
// 1e-5) must still move every weight. An optimizer that updated act_t weights directly would
// leave them all where they were.
TEST_F(Model, MasterWeightsStayFp32) {
    SCOPED_TRACE(adamw_trace());
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<TestStage> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    model.zero_grad();
    model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
    model.backward(1.0f / float(c.B * c.T));
    const Vec grads = model.gradients();
    gpt::AdamWSettings adamw;
    adamw.weight_decay = 0.0f;  // only Adam's step
    adamw.grad_clip = 0.0f;
    const float lr = 1e-5f;
    model.update(adamw, lr, 1);
    model.sync();
    sync_and_check("update");
    const Vec after = model.parameters();
    // Adam's first step is lr · g / (|g| + eps): within 1% of lr for every |g| above 100 · eps.
    // (In this case 75% of the gradients are above 1e-6; a threshold of 1e-5 kept only 4%.)
    const float min_grad = 100.0f * adamw.eps;
    size_t checked = 0, moved = 0, wrong_size = 0;
    for (size_t i = 0; i < after.size(); ++i) {
        if (!(std::fabs(grads[i]) > min_grad)) continue;
        ++checked;
        const double delta = std::fabs(double(after[i]) - double(c.params[i]));
        if (delta > 0.0) ++moved;
        if (!(delta > 0.9 * lr && delta < 1.1 * lr)) ++wrong_size;
    }
    ASSERT_GT(checked, after.size() / 2) << "too few weights with a gradient to judge";
    EXPECT_EQ(moved, checked) << "of " << checked << " weights with a gradient, only " << moved
                              << " moved by a step of " << lr << ": the update did not reach fp32 master weights";
    EXPECT_EQ(wrong_size, 0u) << wrong_size << " of " << checked << " weights moved by other than about lr = " << lr;
}

// Two micro-batches of 2 sequences, their gradients accumulated, against one batch of 4: the same
// loss, gradients and update, up to the order of the additions (testing/reference_run.h).
TEST_F(Model, GradientAccumulation) {
    SCOPED_TRACE(model_trace());
    const double tol = gpt::test::model_rel_l2(kPrecision);
    const gpt::test::AccumulationRun r = gpt::test::whole_and_accumulated<TestStage>(2);
    // Anchored on the CPU reference, so that two equally wrong runs cannot agree their way to a pass.
    const float reference_loss = gpt::test::reference_step0<gpt::CpuReference>().loss;
    EXPECT_TRUE(gpt::test::curves_close("loss vs the CPU reference", {r.whole.result.loss}, {reference_loss}, tol));
    EXPECT_TRUE(gpt::test::curves_close("loss", {r.accumulated.result.loss}, {r.whole.result.loss}, tol));
    EXPECT_TRUE(
        gpt::test::curves_close("gradient norm", {r.accumulated.result.grad_norm}, {r.whole.result.grad_norm}, tol));
    EXPECT_TRUE(gpt::test::rel_l2_close("accumulated gradients", r.accumulated.grads, r.whole.grads, tol));
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    Vec step_whole(c.params.size()), step_accumulated(c.params.size());
    for (size_t i = 0; i < c.params.size(); ++i) {
        step_whole[i] = r.whole.params[i] - c.params[i];
        step_accumulated[i] = r.accumulated.params[i] - c.params[i];
    }
    EXPECT_TRUE(gpt::test::rel_l2_close("update from accumulated gradients", step_accumulated, step_whole, tol));
}

// A step's first backward writes the matmuls' weight gradients (beta = 0) instead of adding them
// to zeroed memory, and zero_grad() clears only the other gradients (train/gpt.h). So: the
// gradients of another batch, twice (a backward without zero_grad must add: twice the first),
// then zero_grad and one backward of the reference batch must give the CPU reference's
// gradients tensor by tensor, with no trace of the other batch's, and its loss. Before that, the
// validation loss (forward, evaluate) against the CPU's.
template <class Stage>
void expect_first_backward_writes_the_gradients() {
    const double tol = gpt::test::model_rel_l2(kPrecision);
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    const gpt::test::Step0 cpu = gpt::test::reference_step0<gpt::CpuReference>();
    gpt::GPT<Stage> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
    model.evaluate();
    const double validation_loss = model.sync().loss;
    EXPECT_TRUE(gpt::test::curves_close("validation loss vs the CPU", {validation_loss}, {cpu.loss}, tol));

    Rng rng(test_seed());
    const std::vector<int> other = random_tokens(rng, c.tokens.size(), c.config.vocab_size);
    double loss = 0;
    auto backward = [&](const std::vector<int>& tokens, bool zero_grad_first) {
        if (zero_grad_first) model.zero_grad();
        model.forward(tokens.data(), tokens.data() + 1, c.B, c.T);
        model.backward(1.0f / float(c.B * c.T));
        loss = model.sync().loss;
        return model.gradients();
    };
    const Vec once = backward(other, true), twice = backward(other, false), reference = backward(c.tokens, true);
    EXPECT_TRUE(gpt::test::curves_close("loss over the other batch's gradients vs the CPU", {loss}, {cpu.loss}, tol));
    const gpt::ParamLayout layout(c.config);
    for (int t = 0; t < gpt::kNumParamTensors; ++t) {
        const auto begin = layout.offset[t], end = begin + layout.size[t];
        auto part = [&](const Vec& v, float factor) {
            Vec p(v.begin() + begin, v.begin() + end);
            for (float& x : p) x *= factor;
            return p;
        };
        const std::string name = gpt::ParamLayout::name(t);
        EXPECT_TRUE(gpt::test::rel_l2_close("a second backward adds, " + name, part(twice, 1), part(once, 2), tol));
        EXPECT_TRUE(gpt::test::rel_l2_close("zero_grad, then a backward over another batch's, " + name,
                                            part(reference, 1), part(cpu.grads, 1), tol));
    }
}

TEST_F(Model, FirstBackwardWritesTheGradients) {
    SCOPED_TRACE(model_trace());
    EXPECT_TRUE(gpt::GPT<TestStage>::kFirstBackwardWrites)
        << "the stage's matmuls do not follow weight_gradient_beta: every step clears all gradients";
    expect_first_backward_writes_the_gradients<TestStage>();
}

// The loss in chunks of rows (S::kLossChunkRows: stage 04 on, common/train/model_graph.h), in
// every stage at chunks of 7 rows, which divide none of the case's 128 positions: each chunk's
// rows of logits, losses and dlnf land in their place, and the first chunk writes wte's gradient
// in a step's first backward while the others add. (Captured as a CUDA Graph too: below.)
struct SevenRowChunks : TestStage {
    static constexpr int kLossChunkRows = 7;
};

TEST_F(Model, LossInChunksMatchesTheCpu) {
    SCOPED_TRACE(model_trace());
    expect_first_backward_writes_the_gradients<SevenRowChunks>();
}

// HellaSwag's evaluation (train/eval_hellaswag.h) on this stage: the loss of each position of a
// forward with fewer rows and positions than the model was built for (as the evaluation's
// batches are) matches the CPU reference's, and so does the mean loss of every ending of
// examples of odd lengths with a last batch that is not full; evaluations between steps leave
// the steps as they would have been.
TEST_F(Model, EvaluationLossesMatchTheCpu) {
    SCOPED_TRACE(model_trace());
    const double tol = gpt::test::model_rel_l2(kPrecision);
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    const int V = c.config.vocab_size;
    Rng rng(test_seed());
    const int B = std::max(1, c.B - 1), T = std::max(1, c.T - 3);
    const std::vector<int> inputs = random_tokens(rng, size_t(B) * T, V), targets = random_tokens(rng, size_t(B) * T, V);
    gpt::GPT<TestStage> gpu(c.config, c.B, c.T);
    gpt::GPT<gpt::CpuReference> cpu(c.config, c.B, c.T);
    gpu.set_parameters(c.params);
    cpu.set_parameters(c.params);
    gpu.forward(inputs.data(), targets.data(), B, T);
    cpu.forward(inputs.data(), targets.data(), B, T);
    const std::vector<float> on_gpu = gpu.position_losses();
    sync_and_check("position_losses");
    ASSERT_EQ(on_gpu.size(), size_t(B) * T);
    EXPECT_TRUE(gpt::test::rel_l2_close("losses of a " + std::to_string(B) + " x " + std::to_string(T) + " forward",
                                        on_gpu, cpu.position_losses(), tol));

    std::vector<gpt::EvalExample> examples(5);  // 18 rows: the last batch of B = 4 holds 2
    for (size_t i = 0; i < examples.size(); ++i) {
        gpt::EvalExample& e = examples[i];
        e.line = int64_t(i) + 1;
        e.label = int(i % 2);
        e.context = random_tokens(rng, 1 + (7 * i) % size_t(c.T / 2), V);
        for (size_t k = 0; k < (i == 4 ? 2u : 4u); ++k) e.endings.push_back(random_tokens(rng, 1 + (i + k) % 5, V));
    }
    auto flat = [](const std::vector<std::vector<double>>& means) {
        std::vector<float> all;
        for (const std::vector<double>& m : means) all.insert(all.end(), m.begin(), m.end());
        return all;
    };
    const std::vector<float> gpu_means = flat(gpt::ending_mean_losses(gpu, examples, 0, 1));
    sync_and_check("ending_mean_losses");
    ASSERT_EQ(gpu_means.size(), 18u);
    EXPECT_TRUE(gpt::test::rel_l2_close("mean loss of each ending", gpu_means,
                                        flat(gpt::ending_mean_losses(cpu, examples, 0, 1)), tol));

    gpt::GPT<TestStage> plain(c.config, c.B, c.T);
    plain.set_parameters(c.params);
    const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
    const float loss_scale = 1.0f / float(c.B * c.T);
    const gpt::AdamWSettings adamw;
    for (int t = 1; t <= 3; ++t) {
        SCOPED_TRACE(testing::Message() << "step " << t);
        const gpt::StepResult a = gpu.train_step(batch, c.B, c.T, loss_scale, adamw, 1e-3f, t);
        const gpt::HellaSwagResult h = gpt::evaluate_hellaswag(gpu, examples, gpu.parallel());
        sync_and_check("evaluate_hellaswag");
        EXPECT_EQ(h.examples, 5);
        EXPECT_LE(h.correct, 5);
        const gpt::StepResult b = plain.train_step(batch, c.B, c.T, loss_scale, adamw, 1e-3f, t);
        EXPECT_TRUE(gpt::test::curves_close("loss", {a.loss}, {b.loss}, tol));
        EXPECT_TRUE(gpt::test::curves_close("gradient norm", {a.grad_norm}, {b.grad_norm}, tol));
    }
    EXPECT_TRUE(gpt::test::rel_l2_close("parameters after 3 steps with evaluations between them", gpu.parameters(),
                                        plain.parameters(), tol));
}

// The stage with the opposite kCaptureStep: a step recorded once as a CUDA Graph and replayed
// must train exactly as the same step queued op by op. Recording fails if anything in the step
// makes the host wait (a synchronisation, a copy from pageable memory, an allocation), so this
// test also holds every stage to one synchronisation per step. Also with the loss in chunks of 7
// rows, so that a recorded step holds several chunks (the test case has one at 8192).
template <class Stage>
struct OtherCapture : Stage {
    static constexpr bool kCaptureStep = !Stage::kCaptureStep;
};

template <class Stage>
void expect_captured_step_matches_uncaptured() {
    using Captured = std::conditional_t<Stage::kCaptureStep, Stage, OtherCapture<Stage>>;
    using Uncaptured = std::conditional_t<Stage::kCaptureStep, OtherCapture<Stage>, Stage>;
    const double tol = gpt::test::model_rel_l2(kPrecision);
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    Rng rng(test_seed());
    // Two batches in turn, so that a replay which read stale inputs would show.
    const std::vector<int> other = random_tokens(rng, c.tokens.size(), c.config.vocab_size);
    const gpt::Batch first = gpt::test::reference_batch(c);
    const gpt::Batch second{std::vector<int>(other.begin(), other.end() - 1),
                            std::vector<int>(other.begin() + 1, other.end())};
    gpt::GPT<Captured> captured(c.config, c.B, c.T);
    gpt::GPT<Uncaptured> uncaptured(c.config, c.B, c.T);
    captured.set_parameters(c.params);
    uncaptured.set_parameters(c.params);
    const gpt::AdamWSettings adamw;
    const float loss_scale = 1.0f / float(c.B * c.T);
    const float reference_loss = gpt::test::reference_step0<gpt::CpuReference>().loss;
    for (int t = 1; t <= 5; ++t) {
        SCOPED_TRACE(testing::Message() << "step " << t
                                        << (t == 1 ? " (warm-up)" : t == 2 ? " (recorded)" : " (replayed)"));
        const std::vector<gpt::Batch> batch = {t % 2 ? first : second};
        const float lr = 1e-3f * t;  // new every step: it reaches the graph through device memory
        const gpt::StepResult a = captured.train_step(batch, c.B, c.T, loss_scale, adamw, lr, t);
        sync_and_check("captured step");
        const gpt::StepResult b = uncaptured.train_step(batch, c.B, c.T, loss_scale, adamw, lr, t);
        EXPECT_TRUE(gpt::test::curves_close("loss", {a.loss}, {b.loss}, tol));
        EXPECT_TRUE(gpt::test::curves_close("gradient norm", {a.grad_norm}, {b.grad_norm}, tol));
        if (t == 1)
            EXPECT_TRUE(gpt::test::curves_close("first loss vs the CPU reference", {a.loss}, {reference_loss}, tol));
        if (t >= 2) EXPECT_TRUE(Captured::step_captured(captured.context())) << "the step was not recorded";
    }
    EXPECT_TRUE(
        gpt::test::rel_l2_close("parameters after 5 steps", captured.parameters(), uncaptured.parameters(), tol));
}

TEST_F(Model, CapturedStepMatchesUncaptured) {
    SCOPED_TRACE(model_trace());
    expect_captured_step_matches_uncaptured<TestStage>();
}

TEST_F(Model, CapturedStepInChunksMatchesUncaptured) {
    SCOPED_TRACE(model_trace());
    expect_captured_step_matches_uncaptured<SevenRowChunks>();
}

// ---- the padded vocabulary ------------------------------------------------------------------------

// The stage with the other padding: unpadded where the stage pads (stage 05 on), padded to a
// multiple of 64 where it does not.
struct OtherPadding : TestStage {
    static constexpr int kVocabMultiple = TestStage::kVocabMultiple > 1 ? 1 : 64;
};
// Padding is possible where both classifiers mask the padded columns (not in stage 04).
constexpr bool kCanPad = gpt::masks_padding_v<typename Ops::Classifier> && gpt::masks_padding_v<typename Ops::ClassifierWithGrad>;
// OtherPadding where it can be built (GPT refuses a padded vocabulary without the mask at compile
// time, and a discarded `if constexpr` branch outside a template is still compiled).
using PaddingTwin = std::conditional_t<kCanPad, OtherPadding, TestStage>;

// The padded rows of wte start at zero and get no gradient: after steps with weight decay, and
// a learning rate far above the reference case's, the weights, gradients, moments and act_t
// weights of those rows are still exactly 0. (In a stage that does not pad there are none.)
TEST_F(Model, PaddedRowsStayZero) {
    SCOPED_TRACE(model_trace());
    const gpt::test::ReferenceCase c = gpt::test::overfit_case();
    gpt::GPT<TestStage> model(c.config, c.B, c.T);
    ASSERT_EQ(model.padded_vocab(), c.config.padded_vocab(TestStage::kVocabMultiple));
    model.set_parameters(c.params);
    gpt::AdamWSettings adamw;
    adamw.weight_decay = 0.1f;
    const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
    for (int t = 1; t <= 10; ++t) {
        const gpt::StepResult r = model.train_step(batch, c.B, c.T, 1.0f / float(c.B * c.T), adamw, 1e-2f, t);
        sync_and_check("training step " + std::to_string(t));
        ASSERT_TRUE(std::isfinite(r.loss)) << "step " << t;
    }
    const Vec padding = model.padded_rows();
    ASSERT_EQ(padding.size(), 5 * size_t(model.padded_vocab() - c.config.vocab_size) * c.config.n_embd);
    size_t nonzero = 0;
    for (const float x : padding)
        if (x != 0.0f) ++nonzero;  // NaN too
    EXPECT_EQ(nonzero, 0u) << "of the padded rows' " << padding.size()
                           << " values (weights, gradients, m, v, act_t weights) after 10 steps";
}

// The same model trained with a padded and an unpadded vocabulary: the same step-0 loss and
// gradients (the V real rows), and the same losses and weights over a few steps, within the
// model tolerance of the stage's precision (the matmuls may choose other algorithms at another
// width, so not bit for bit). A stage whose classifier cannot mask padding must refuse it.
TEST_F(Model, PaddingChangesNothing) {
    SCOPED_TRACE(model_trace());
    if constexpr (!kCanPad) {
        // Stage 04's classifier cannot take padding: it says so instead of training wrong.
        StageContext ctx;
        DeviceArray<Act> d_logits(size_t(4) * 1024);
        DeviceArray<int> d_targets(std::vector<int>(4, 0));
        DeviceArray<float> d_losses(4);
        DeviceScratch saved(Ops::Classifier::saved_bytes(4, 1024, sizeof(Act)));
        try {
            Ops::Classifier::forward(ctx, d_losses.data(), saved.data(), d_logits.data(), d_targets.data(), 4, 1000,
                                     1024, nullptr);
            ADD_FAILURE() << "the classifier took 24 padded columns it cannot mask";
        } catch (const gpt::Error& e) {
            EXPECT_NE(std::string(e.what()).find("padded columns"), std::string::npos) << e.what();
        }
        sync_and_check("nothing launched");
    } else {
        const double tol = gpt::test::model_rel_l2(kPrecision);
        const gpt::test::Step0 mine = gpt::test::reference_step0<TestStage>();
        const gpt::test::Step0 other = gpt::test::reference_step0<PaddingTwin>();
        EXPECT_TRUE(gpt::test::curves_close("step-0 loss", {mine.loss}, {other.loss}, tol));
        EXPECT_TRUE(gpt::test::rel_l2_close("step-0 gradients", mine.grads, other.grads, tol));
        const gpt::test::ReferenceCase c = gpt::test::overfit_case();
        gpt::GPT<TestStage> a(c.config, c.B, c.T);
        gpt::GPT<PaddingTwin> b(c.config, c.B, c.T);
        ASSERT_NE(a.padded_vocab(), b.padded_vocab());
        a.set_parameters(c.params);
        b.set_parameters(c.params);
        const gpt::AdamWSettings adamw;
        const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
        std::vector<double> losses_a, losses_b;
        for (int t = 1; t <= 5; ++t) {
            losses_a.push_back(a.train_step(batch, c.B, c.T, 1.0f / float(c.B * c.T), adamw, 1e-3f, t).loss);
            losses_b.push_back(b.train_step(batch, c.B, c.T, 1.0f / float(c.B * c.T), adamw, 1e-3f, t).loss);
        }
        EXPECT_TRUE(gpt::test::curves_close("losses of 5 steps", losses_a, losses_b, tol));
        EXPECT_TRUE(gpt::test::rel_l2_close("parameters after 5 steps", a.parameters(), b.parameters(), tol));
    }
}

// With one process, the stage's Parallel piece changes nothing: stage 06 over NCCL (world size
// 1, the step captured with its NCCL calls on a second stream) trains as stage 05. With one
// process --zero 1 shards nothing and takes the same path; sharding, and every reduction of
// several processes, is tested on the CPU (tests/cpu/test_parallel.cpp). Stages before 06 have
// one process and no Parallel of their own.
struct WithoutParallel : TestStage {
    using Parallel = gpt::SingleProcess;
};

// The body for a stage with a Parallel piece of its own; the stages before 06 take the
// specialisation for SingleProcess (a class template, so that theirs never builds the twin).
template <class Parallel>
struct OneProcess {
    static void trains_as_without_parallel() {
        const double tol = gpt::test::model_rel_l2(kPrecision);
        const gpt::test::ReferenceCase c = gpt::test::overfit_case();
        const gpt::AdamWSettings adamw;
        const std::vector<gpt::Batch> batch = {gpt::test::reference_batch(c)};
        const float scale = 1.0f / float(c.B * c.T);
        // Five steps: the losses, then the gradient norms.
        auto train = [&](auto& model, std::vector<double>& losses, std::vector<double>& norms) {
            model.set_parameters(c.params);
            for (int t = 1; t <= 5; ++t) {
                const gpt::StepResult r = model.train_step(batch, c.B, c.T, scale, adamw, 1e-3f, t);
                losses.push_back(r.loss);
                norms.push_back(r.grad_norm);
            }
        };
        gpt::GPT<WithoutParallel> b(c.config, c.B, c.T);
        std::vector<double> losses_b, norms_b;
        train(b, losses_b, norms_b);
        const std::vector<float> params_b = b.parameters();
        for (const int zero : {0, 1}) {
            SCOPED_TRACE("--zero " + std::to_string(zero));
            Parallel parallel(gpt::ParallelSettings{zero});
            ASSERT_EQ(parallel.world(), 1) << "run the GPU tests without a launcher's environment";
            ASSERT_FALSE(parallel.shards_optimizer()) << "one process has nothing to shard";
            gpt::GPT<TestStage> a(c.config, c.B, c.T, 1, &parallel);
            std::vector<double> losses_a, norms_a;
            train(a, losses_a, norms_a);
            EXPECT_TRUE(gpt::test::curves_close("losses of 5 steps", losses_a, losses_b, tol));
            EXPECT_TRUE(gpt::test::curves_close("gradient norms of 5 steps", norms_a, norms_b, tol));
            EXPECT_TRUE(gpt::test::rel_l2_close("parameters after 5 steps", a.parameters(), params_b, tol));
        }
    }
};
template <>
struct OneProcess<gpt::SingleProcess> {
    static void trains_as_without_parallel() {
        const gpt::SingleProcess one;
        EXPECT_EQ(one.world(), 1);
        EXPECT_FALSE(one.shards_optimizer());
    }
};

TEST_F(Model, OneProcessTrainsAsWithoutParallel) {
    SCOPED_TRACE(model_trace());
    OneProcess<typename Ops::Parallel>::trains_as_without_parallel();
}

// Several ranks of the stage's data parallelism on one GPU: ranks that are threads, each with its
// own model and stream, their collectives through the host's TCP group (tests/gpu/thread_communicator.cuh).
// NCCL takes one GPU per rank; this tests what stage 06 does around NCCL's calls, on the GPU's
// kernels: N ranks of batch B train as one rank of batch N x B, with the gradients all-reduced
// bucket by bucket during backward (--zero 0), and with ZeRO-1's reduce-scatter, sharded AdamW
// (the fused kernel on a shard) and all-gather of the bf16 weights (--zero 1). The threads'
// collectives make the host wait, so these models do not capture their step.
template <class S, class = void>
struct ThreadRanksOf {
    using type = void;  // the stage has no data parallelism of its own
};
template <class S>
struct ThreadRanksOf<S, std::void_t<typename gpt::Ops<S>::Parallel::template WithCommunicator<
                            gpt::test::ThreadCommunicator>>> {
    struct type : S {
        static constexpr bool kCaptureStep = false;
        using Parallel =
            typename gpt::Ops<S>::Parallel::template WithCommunicator<gpt::test::ThreadCommunicator>;
    };
};
struct OneRankUncaptured : TestStage {
    static constexpr bool kCaptureStep = false;
    using Parallel = gpt::SingleProcess;
};

// The test's body for a stage with data parallelism of its own (ThreadRanks: the stage with ranks
// that are threads); the stages before 06 take the specialisation below, which has nothing to sum.
// (A class template, not `if constexpr`: the discarded branch of a test's body, which is no
// template, would still be compiled with ThreadRanks = void.)
template <class ThreadRanks>
struct SeveralRanks {
    static void train_as_one() {
        const gpt::GPTConfig config = gpt::test::overfit_case().config;
        const std::vector<float> init = gpt::test::overfit_case().params;
        const int world = 3, B = 2, T = 32, steps = 3;
        // Step s: world x B rows of T + 1 random tokens; rank r reads rows [r*B, (r+1)*B), as the
        // data loader gives it.
        auto batch = [&](int step, int first_row, int rows) {
            Rng rng(test_seed() + step);
            std::vector<std::vector<int>> all(world * B);
            for (auto& row : all)
                for (int t = 0; t <= T; ++t) row.push_back(int(rng.below(config.vocab_size)));
            gpt::Batch b;
            for (int r = first_row; r < first_row + rows; ++r) {
                b.inputs.insert(b.inputs.end(), all[r].begin(), all[r].end() - 1);
                b.targets.insert(b.targets.end(), all[r].begin() + 1, all[r].end());
            }
            return std::vector<gpt::Batch>{b};
        };
        gpt::AdamWSettings adamw;
        adamw.grad_clip = 0.5f;  // clipping on: the norm must be the norm of all gradients, not of a shard
        const float scale = 1.0f / float(world * B * T);
        struct Run {
            std::vector<double> losses, norms;
            std::vector<float> params;
        };
        auto train = [&](auto& model, int first_row, int rows) {
            Run run;
            model.set_parameters(init);
            for (int s = 0; s < steps; ++s) {
                const gpt::StepResult r =
                    model.train_step(batch(s, first_row, rows), rows, T, scale, adamw, 1e-3f, s + 1);
                run.losses.push_back(r.loss);
                run.norms.push_back(r.grad_norm);
            }
            run.params = model.parameters();
            return run;
        };
        gpt::GPT<OneRankUncaptured> one(config, world * B, T);
        const Run expected = train(one, 0, world * B);

        const double tol = gpt::test::model_rel_l2(kPrecision);
        // The ranks meet through a file (common/dist/group.h), on the loopback interface.
        const std::string meeting = ::testing::TempDir() + "gpt_ranks_" + std::to_string(::getpid());
        ::setenv("GPT_INIT_FILE", meeting.c_str(), 1);
        ::setenv("GPT_INIT_ADDR", "127.0.0.1", 1);
        ::setenv("GPT_INIT_TIMEOUT", "60", 1);  // a rank that failed early stops the others within a minute
        for (const int zero : {0, 1}) {
            SCOPED_TRACE("--zero " + std::to_string(zero));
            std::vector<Run> runs(world);
            std::vector<std::string> errors(world);
            std::vector<std::thread> threads;
            for (int r = 0; r < world; ++r)
                threads.emplace_back([&, r] {
                    try {
                        gpt::test::ThreadCommunicator::join(r, world);
                        typename ThreadRanks::Parallel parallel(gpt::ParallelSettings{zero});
                        gpt::GPT<ThreadRanks> model(config, B, T, 1, &parallel);
                        runs[r] = train(model, r * B, B);
                    } catch (const std::exception& e) {
                        errors[r] = e.what();
                    }
                });
            for (auto& t : threads) t.join();
            for (int r = 0; r < world; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
            EXPECT_TRUE(gpt::test::curves_close("losses", runs[0].losses, expected.losses, tol));
            EXPECT_TRUE(gpt::test::curves_close("gradient norms", runs[0].norms, expected.norms, tol));
            EXPECT_TRUE(gpt::test::rel_l2_close("parameters", runs[0].params, expected.params, tol));
            for (int r = 1; r < world; ++r) {  // the ranks hold one model, bit for bit
                EXPECT_EQ(runs[r].losses, runs[0].losses) << "rank " << r;
                EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
            }
        }
        for (const char* name : {"GPT_INIT_FILE", "GPT_INIT_ADDR", "GPT_INIT_TIMEOUT"}) ::unsetenv(name);
    }
};
template <>
struct SeveralRanks<void> {
    static void train_as_one() {
        const gpt::SingleProcess one;  // stages before 06: one process, nothing to sum
        EXPECT_EQ(one.world(), 1);
    }
};

TEST_F(Model, SeveralRanksTrainAsOne) {
    SCOPED_TRACE(model_trace());
    SeveralRanks<typename ThreadRanksOf<TestStage>::type>::train_as_one();
}

// ---- the same bits ------------------------------------------------------------------------------

// Two runs of a stage from the same seed on the same batches must give the same bits, and so must
// a run stopped, saved and resumed and the run straight through: between them a difference is a
// bug (memory read before it was written, a race, state a checkpoint leaves out), not rounding.
// Only a stage whose step is repeatable can promise that; one whose policy says why its step is not
// (kNotBitwiseRepeatable: sums of atomicAdds, algorithms chosen by timing) skips these tests with
// that reason. One process: NCCL's sums over several (stage 06) are not tested here.
namespace {

constexpr const char* kNotRepeatable = TestStage::kNotBitwiseRepeatable;

// What a run leaves that the next step would read, and what each step reported.
struct RunBits {
    std::vector<float> losses, grad_norms;  // of each step
    Vec params, m, v;                       // fp32 master weights and AdamW's moments, file layout
    uint64_t act_weights = 0;               // a fingerprint of the act_t weights the passes read
};

// A float with every digit it needs, and its bits.
std::string bits_text(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    char buf[48];
    std::snprintf(buf, sizeof(buf), "%.9g (0x%08x)", x, u);
    return buf;
}

// Where two arrays of the file layout differ in any bit (memcmp: a NaN equals only the same NaN,
// -0 is not 0): for each tensor that does, how many of its elements and the first of them; ""
// where every bit is the same.
std::string bit_differences(const gpt::ParamLayout& layout, const Vec& a, const Vec& b) {
    if (a.size() != layout.total() || b.size() != layout.total())
        return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) + ", not " +
               std::to_string(layout.total());
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return "";
    std::string out;
    for (int t = 0; t < gpt::kNumParamTensors; ++t) {
        const size_t begin = layout.offset[t], end = begin + layout.size[t];
        size_t differ = 0, first = 0;
        for (size_t i = begin; i < end; ++i)
            if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && differ++ == 0) first = i;
        if (differ > 0)
            out += "\n  " + std::string(gpt::ParamLayout::name(t)) + ": " + std::to_string(differ) + " of " +
                   std::to_string(layout.size[t]) + " elements differ, the first " + std::to_string(first - begin) +
                   ": " + bits_text(a[first]) + " vs " + bits_text(b[first]);
    }
    return out;
}

// Every step's loss and gradient norm, the weights, the moments and the act_t weights of `b`
// against those of `a`, bit for bit.
void expect_same_run_bits(const RunBits& a, const RunBits& b, const gpt::ParamLayout& layout) {
    ASSERT_EQ(a.losses.size(), b.losses.size());
    ASSERT_EQ(a.grad_norms.size(), b.grad_norms.size());
    auto same = [](float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; };
    for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_TRUE(same(a.losses[i], b.losses[i]))
            << "loss of step " << i + 1 << ": " << bits_text(a.losses[i]) << " vs " << bits_text(b.losses[i]);
        EXPECT_TRUE(same(a.grad_norms[i], b.grad_norms[i]))
            << "gradient norm of step " << i + 1 << ": " << bits_text(a.grad_norms[i]) << " vs "
            << bits_text(b.grad_norms[i]);
    }
    auto expect_same_array = [&](const char* what, const Vec& x, const Vec& y) {
        const std::string differences = bit_differences(layout, x, y);
        EXPECT_TRUE(differences.empty()) << what << " differ:" << differences;
    };
    expect_same_array("fp32 master weights", a.params, b.params);
    expect_same_array("AdamW's m", a.m, b.m);
    expect_same_array("AdamW's v", a.v, b.v);
    EXPECT_EQ(a.act_weights, b.act_weights) << "fingerprints of the act_t weights the passes read";
}

// A run of these tests, made as the trainer makes it (train/loop.h, train_with) from its options:
// the micro model from gpt_init's initialisation with the test's seed, B x T = 4 x 32, kSteps steps
// of a schedule with warmup and cosine decay, weight decay and gradient clipping on, each step on
// the next batch the data loader reads from a shard of random tokens in the test's scratch folder.
class BitsRun {
  public:
    static constexpr int kSteps = 5;

    // The options of a run; the shard they name is written here.
    static gpt::TrainOptions new_options() {
        gpt::TrainOptions o = gpt::default_options(true);
        o.model = "micro";
        o.data_dir = gpt::test::scratch_dir(std::string("stage_") + TestStage::name);
        o.batch = 4;
        o.seq = 32;
        o.steps = kSteps;
        o.warmup = 2;
        o.lr = 1e-3f;
        o.seed = test_seed();
        Rng rng(test_seed());
        // A window for every step and the one token after the last: the loader never starts over.
        gpt::write_shard(o.data_dir + "/bits_train_000000.bin",
                         random_tokens(rng, size_t(kSteps) * o.batch * o.seq + 1,
                                       gpt::config_by_name(o.model).vocab_size));
        return o;
    }

    // A model and a data loader for the run of `options` from its start, or, with a checkpoint,
    // from where that stopped.
    explicit BitsRun(const gpt::TrainOptions& options, const gpt::Checkpoint* start = nullptr)
        : o_(options), config_(start ? start->config : gpt::config_by_name(o_.model)),
          model_(std::make_unique<gpt::GPT<TestStage>>(config_, o_.batch, o_.seq)),
          data_(gpt::find_shards(o_.data_dir, "train"), o_.batch, o_.seq, 0, 1, config_.vocab_size),
          step_(start ? start->step : 0) {
        if (start) {
            model_->resume_from(*start);
            data_.seek({start->run.data_shard, start->run.data_pos});
        } else {
            model_->set_parameters(gpt::init_parameters(config_, o_.seed));
        }
    }

    // The run's next step, as the trainer's loop takes it; its loss and gradient norm go to `bits`.
    void step(RunBits& bits) {
        const float lr = gpt::learning_rate(step_, o_.steps, o_.warmup, o_.lr, o_.min_lr_frac);
        const float loss_scale = static_cast<float>(1.0 / (double(o_.batch) * o_.seq));
        const gpt::StepResult r = model_->train_step({data_.next()}, o_.batch, o_.seq, loss_scale, o_.adamw, lr,
                                                     step_ + 1);
        sync_and_check("training step " + std::to_string(step_ + 1));
        ++step_;
        // The trainer stops at a loss or norm that is not finite; two runs equally NaN agree.
        EXPECT_TRUE(std::isfinite(r.loss) && std::isfinite(r.grad_norm))
            << "step " << step_ << ": loss " << r.loss << ", gradient norm " << r.grad_norm;
        bits.losses.push_back(r.loss);
        bits.grad_norms.push_back(r.grad_norm);
    }
    void steps_until(int last, RunBits& bits) {
        while (step_ < last) step(bits);
    }

    // The first step's loss in `bits` against the CPU reference's for the run of `options`, so that
    // two runs equally wrong cannot agree their way to a pass.
    static void expect_first_loss_as_the_cpus(const gpt::TrainOptions& options, const RunBits& bits) {
        ASSERT_FALSE(bits.losses.empty());
        const gpt::GPTConfig config = gpt::config_by_name(options.model);
        gpt::DataLoader data(gpt::find_shards(options.data_dir, "train"), options.batch, options.seq, 0, 1,
                             config.vocab_size);
        const gpt::Batch first = data.next();
        gpt::GPT<gpt::CpuReference> cpu(config, options.batch, options.seq);
        cpu.set_parameters(gpt::init_parameters(config, options.seed));
        cpu.forward(first.inputs.data(), first.targets.data(), options.batch, options.seq);
        cpu.evaluate();
        EXPECT_TRUE(gpt::test::curves_close("first loss vs the CPU reference", {bits.losses[0]}, {cpu.sync().loss},
                                            gpt::test::model_rel_l2(kPrecision)));
    }

    // What the trainer saves after the steps so far (the sampling generator as it starts: these
    // runs sample nothing).
    gpt::Checkpoint checkpoint() {
        gpt::Checkpoint c = model_->checkpoint(step_);
        c.run = gpt::run_state(o_, 1, 1, data_, Rng(o_.seed + 1));
        return c;
    }
    // After the last step: the weights, moments and act_t weights into `bits`.
    void finish(RunBits& bits) {
        bits.params = model_->parameters();
        bits.m = model_->optimizer_m();
        bits.v = model_->optimizer_v();
        bits.act_weights = model_->weights_fingerprint();
    }
    gpt::ParamLayout layout() const { return gpt::ParamLayout(config_); }

  private:
    gpt::TrainOptions o_;
    gpt::GPTConfig config_;
    std::unique_ptr<gpt::GPT<TestStage>> model_;
    gpt::DataLoader data_;
    int step_;  // steps taken
};

}  // namespace

// Two models from the same seed, alive side by side, their steps taken in turn on the same
// batches: every step's loss and gradient norm, and after the last the fp32 master weights,
// AdamW's moments and the act_t weights, the same bits (and the first loss the CPU reference's,
// within the model tolerance).
TEST_F(Model, SameSeedSameBits) {
    if (kNotRepeatable != nullptr) GTEST_SKIP() << kDoesNotApply << kNotRepeatable;
    SCOPED_TRACE(model_trace());
    const gpt::TrainOptions options = BitsRun::new_options();
    BitsRun first(options), second(options);
    RunBits a, b;
    for (int step = 0; step < BitsRun::kSteps; ++step) {
        first.step(a);
        second.step(b);
    }
    first.finish(a);
    second.finish(b);
    BitsRun::expect_first_loss_as_the_cpus(options, a);
    expect_same_run_bits(a, b, first.layout());
}

// A run of 5 steps straight, and the same run stopped after step 2 and resumed as `--resume PATH`
// does it (train/main.inl, train/loop.h): the checkpoint written with the model's part
// (GPT::checkpoint: weights, moments, steps taken) and the run's (run_state: its options, the
// data loader's position); read back, the run's options taken up from it (resume_options) and
// checked (check_resume), the weights and moments put into a fresh model (GPT::resume_from), the
// loader moved to the saved position, the schedule and AdamW's step count continued from the
// saved step. That is all a step reads (GPT::checkpoint says why), so every loss and gradient norm
// and the final state must be the same bits. The fresh model warms up again in step 3 and, where
// the stage records its step, records it in step 4, while the straight run replays its recording:
// recorded and queued steps must agree too.
TEST_F(Model, ResumedRunMatchesUninterrupted) {
    if (kNotRepeatable != nullptr) GTEST_SKIP() << kDoesNotApply << kNotRepeatable;
    SCOPED_TRACE(model_trace());
    constexpr int kStopAfter = 2;
    const gpt::TrainOptions options = BitsRun::new_options();
    RunBits straight, resumed;
    {
        BitsRun run(options);
        run.steps_until(BitsRun::kSteps, straight);
        run.finish(straight);
    }
    std::string path = options.data_dir + "/run.ckpt";
    {
        BitsRun run(options);
        run.steps_until(kStopAfter, resumed);
        gpt::save_checkpoint(path, run.checkpoint());
    }
    char program[] = "test_stage", resume[] = "--resume";
    char* argv[] = {program, resume, path.data(), nullptr};
    const gpt::TrainOptions again =
        gpt::resume_options(3, argv, gpt::default_options(true), gpt::load_checkpoint_header(path).run);
    const gpt::Checkpoint start = gpt::load_checkpoint(again.resume);
    ASSERT_EQ(start.step, kStopAfter);
    gpt::check_resume(again, start, 1, 1);
    BitsRun run(again, &start);
    run.steps_until(again.steps, resumed);
    run.finish(resumed);
    BitsRun::expect_first_loss_as_the_cpus(options, straight);
    expect_same_run_bits(straight, resumed, run.layout());
}

// ---- the policy ---------------------------------------------------------------------------------

// The op table that the banner and --help print names, for every op, a file of the repository
// (or says which ops a fusion slot composes). Needs no GPU.
TEST(Policy, EveryOpNamesAFileThatExists) {
    const char* root = std::getenv("GPT_SOURCE_DIR");
    ASSERT_NE(root, nullptr) << "GPT_SOURCE_DIR is not set (CTest sets it)";
    const std::vector<gpt::OpRow> table = gpt::op_table<TestStage>();
    ASSERT_EQ(table.size(), 14u);
    for (const gpt::OpRow& row : table) {
        SCOPED_TRACE(row.name + ": " + row.where);
        if (row.where.rfind("unfused: ", 0) == 0) {
            EXPECT_NE(row.where.find("common/train/compose.h"), std::string::npos);
            continue;
        }
        // One file, or two joined by " + " (an op finished by a later stage's piece).
        const size_t plus = row.where.find(" + ");
        for (const std::string& file :
             plus == std::string::npos ? std::vector<std::string>{row.where}
                                       : std::vector<std::string>{row.where.substr(0, plus), row.where.substr(plus + 3)}) {
            EXPECT_TRUE(file.rfind("stages/", 0) == 0 || file.rfind("common/", 0) == 0)
                << "not a path from the repository's top: " << file;
            EXPECT_EQ(file.find(".."), std::string::npos) << "not a plain path: " << file;
            EXPECT_TRUE(std::filesystem::is_regular_file(std::filesystem::path(root) / file)) << file;
        }
    }
    const std::string banner = gpt::describe_policy<TestStage>();
    EXPECT_NE(banner.find(gpt::precision_name(kPrecision)), std::string::npos) << banner;
}

// Each stage adds its one optimization: timing cuBLASLt's matmul candidates is stage 04's
// (kTimeMatmuls, the counterpart of torch.compile's max-autotune); stages 00-03 take the
// heuristic's first choice, as PyTorch eager does. The policy and its banner: no GPU needed.
TEST(Policy, TimesMatmulsFromStage04On) {
    const int stage = std::atoi(TestStage::name);  // "04_fused_kernels": 4
    EXPECT_EQ(TestStage::kTimeMatmuls, stage >= 4) << TestStage::name;
    const std::string banner = gpt::describe_policy<TestStage>();
    EXPECT_NE(banner.find(TestStage::kTimeMatmuls ? "kTimeMatmuls on" : "its heuristic's first choice (kTimeMatmuls off)"),
              std::string::npos)
        << banner;
}
