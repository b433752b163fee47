// A stage policy, resolved: which op the model graph runs for each name, and where it is
// written. The graph reads its ops from `Ops<S>`, never from S directly, so that the rules
// below hold for every stage:
//
//   - a fusion slot the stage leaves `Unfused` runs the stage's own single ops, one after the
//     other (train/compose.h): override `Matmul` and the MLP's first layer follows;
//   - every op names the file it comes from (`source`, or `composed_of` for a composition),
//     and `op_table<S>()` lists them: the banner and --help of every trainer print it.
#pragma once
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "train/compose.h"
#include "train/precision.h"
#include "util/compute_capability.h"

namespace gpt {

// A stage policy as a value, for constructors that set themselves up from the policy: the
// CUDA context takes the stage's matmul arithmetic from it (common/cuda/backend.cuh).
template <class S>
struct StageTag {};
template <class S>
inline constexpr StageTag<S> stage_tag{};

// The value of a fusion slot that a stage does not fill with a fused kernel.
struct Unfused {};

template <class Slot, class Composition>
using SlotOr = std::conditional_t<std::is_same_v<Slot, Unfused>, Composition, Slot>;

template <class S>
struct Ops {
    // A message cannot hold S::name; the compiler names the stage, as the S it instantiates.
    static_assert(activations_fit<typename S::act_t>(S::kPrecision),
                  "the matmul precision (kPrecision) and activation type (act_t) disagree in the policy of stage S "
                  "(named with this error): FP32 and TF32 matmuls read float activations, BF16 matmuls bf16 ones");
    using Embedding = typename S::Embedding;
    using LayerNorm = typename S::LayerNorm;
    using Matmul = typename S::Matmul;
    using Attention = typename S::Attention;
    using Gelu = typename S::Gelu;
    using Residual = typename S::Residual;
    using Classifier = typename S::Classifier;
    using MatmulBiasGelu = SlotOr<typename S::MatmulBiasGelu, compose::MatmulThenGelu<Matmul, Gelu>>;
    using MatmulBackwardGelu =
        SlotOr<typename S::MatmulBackwardGelu, compose::MatmulBackwardThenGelu<Matmul, Gelu>>;
    using ResidualLayerNorm =
        SlotOr<typename S::ResidualLayerNorm, compose::ResidualThenLayerNorm<Residual, LayerNorm>>;
    using ClassifierWithGrad = SlotOr<typename S::ClassifierWithGrad, compose::ClassifierThenGrad<Classifier>>;
    using Optimizer = typename S::Optimizer;
    using Parallel = typename S::Parallel;
};

// The head sizes a stage's attention handles: all of them, unless the op declares a list, as a
// kernel written for some head sizes only does next to its code:
//
//     struct FlashAttention {
//         static constexpr int kHeadSizes[] = {16, 32, 64};
//
// The model refuses a config whose head size is not in it before it allocates anything, and the
// GPU tests run that op on those head sizes only (tests/gpu/stage_tests.cuh).
template <class Attention, class = void>
struct AttentionHeadSizes {
    static constexpr bool kDeclared = false;
    static bool supports(int) { return true; }
    static std::string list() { return "any"; }
};
template <class Attention>
struct AttentionHeadSizes<Attention, std::void_t<decltype(Attention::kHeadSizes)>> {
    static constexpr bool kDeclared = true;
    static bool supports(int head_size) {
        for (const int h : Attention::kHeadSizes)
            if (h == head_size) return true;
        return false;
    }
    static std::string list() {
        std::string s;
        for (const int h : Attention::kHeadSizes) s += (s.empty() ? "" : ", ") + std::to_string(h);
        return s;
    }
};

// Whether a classifier takes rows with padded columns (Vp > V) and keeps them out of the softmax
// and the gradient. Every classifier does unless it says otherwise, as stage 04's fused one does
// (`kMasksPadding = false`: stage 05 adds the mask); the model refuses a padded vocabulary with a
// classifier that does not.
template <class Classifier, class = void>
inline constexpr bool masks_padding_v = true;
template <class Classifier>
inline constexpr bool masks_padding_v<Classifier, std::void_t<decltype(Classifier::kMasksPadding)>> =
    Classifier::kMasksPadding;

// A source file's path from the repository's top (stages/..., common/...), whatever directory
// it was compiled in (a workshop build compiles a copy of stages/) and however it was included
// (`../00_fp32_baseline/` steps are resolved).
inline std::string repo_path(const char* file) {
    std::vector<std::string> parts;
    std::string part;
    for (const char* c = file;; ++c) {
        if (*c == '/' || *c == '\0') {
            if (part == "..") {
                if (!parts.empty()) parts.pop_back();
            } else if (!part.empty() && part != ".") {
                parts.push_back(part);
            }
            part.clear();
            if (*c == '\0') break;
        } else {
            part += *c;
        }
    }
    // From the last "stages" or "common" directory on.
    for (size_t i = parts.size(); i-- > 0;) {
        if (parts[i] != "stages" && parts[i] != "common") continue;
        std::string path = parts[i];
        for (size_t j = i + 1; j < parts.size(); ++j) path += "/" + parts[j];
        return path;
    }
    return file;
}

struct OpRow {
    std::string name, where;
};

namespace detail {
template <class Op, class = void>
struct IsComposed : std::false_type {};
template <class Op>
struct IsComposed<Op, std::void_t<decltype(Op::composed_of)>> : std::true_type {};

// An op written in one file and finished by a piece from another (stage 05's classifier: stage
// 04's kernel, its padded columns masked by stage 05) names both: `part`.
template <class Op, class = void>
struct HasPart : std::false_type {};
template <class Op>
struct HasPart<Op, std::void_t<decltype(Op::part)>> : std::true_type {};

template <class Op>
std::string where() {
    if constexpr (IsComposed<Op>::value) {
        return std::string("unfused: ") + Op::composed_of + " (common/train/compose.h)";
    } else if constexpr (HasPart<Op>::value) {
        const std::string file = repo_path(Op::source), part = repo_path(Op::part);
        return part == file ? file : file + " + " + part;
    } else {
        return repo_path(Op::source);
    }
}
}  // namespace detail

// Every op of the resolved policy with the file it comes from, in the order the graph uses them.
template <class S>
std::vector<OpRow> op_table() {
    using O = Ops<S>;
#define GPT_OP_ROW(op) OpRow{#op, detail::where<typename O::op>()}
    return {
        GPT_OP_ROW(Embedding), GPT_OP_ROW(LayerNorm), GPT_OP_ROW(Matmul), GPT_OP_ROW(Attention),
        GPT_OP_ROW(Gelu), GPT_OP_ROW(Residual), GPT_OP_ROW(Classifier), GPT_OP_ROW(MatmulBiasGelu),
        GPT_OP_ROW(MatmulBackwardGelu), GPT_OP_ROW(ResidualLayerNorm), GPT_OP_ROW(ClassifierWithGrad), GPT_OP_ROW(Optimizer), GPT_OP_ROW(Parallel),
        OpRow{"matmul math", S::template matmul_math<S>()},
    };
#undef GPT_OP_ROW
}

// What a GPU stage asks of the GPU: kMinComputeCapability and kGpuReason, which a stage sets
// where it starts to need more than the stage before it (stages/*/stage.cuh).
template <class S>
GpuNeed stage_gpu_need() {
    return {std::string("stage ") + S::name, S::kMinComputeCapability, S::kGpuReason};
}

// Stops with one line when this machine cannot run stage S: no GPU, or one older than the stage
// needs (common/cuda/backend.cuh). The CPU reference runs anywhere.
template <class S>
void check_stage_device() {
    if constexpr (S::kIsGpu) S::template check_device_for<S>();
    else S::check_device();
}

// The policy as the banner and --help print it: its settings, the GPUs it runs on, then one line
// per op.
template <class S>
std::string describe_policy() {
    std::string s = std::string("policy     act_t ") + act_type_name<typename S::act_t>() + ", precision " +
                    precision_name(S::kPrecision) + ", vocabulary multiple " + std::to_string(S::kVocabMultiple) +
                    ", step capture " + (S::kCaptureStep ? "on (CUDA Graph)" : "off") +
                    (S::kLossChunkRows > 0 ? ", loss in chunks of " + std::to_string(S::kLossChunkRows) + " rows"
                                           : std::string()) +
                    "\n";
    if constexpr (S::kIsGpu) {
        s += "gpu        " + describe_gpu_need(stage_gpu_need<S>()) + "\n";
        s += "matmuls    " + S::template matmul_algorithm<S>() + "\n";
    }
    for (const OpRow& row : op_table<S>()) {
        char line[512];
        std::snprintf(line, sizeof(line), "  %-19s %s\n", row.name.c_str(), row.where.c_str());
        s += line;
    }
    return s;
}

}  // namespace gpt
