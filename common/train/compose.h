// The fusion slots of the model graph, filled with the single ops run one after another.
//
// The graph (common/train/model_graph.h) calls four groups of ops through one name each, so that a
// stage can replace the group with one fused kernel (stage 04) by overriding that name alone:
//
//   MatmulBiasGelu      y = gelu(x · Wᵀ + b)                      the MLP's first layer
//   MatmulBackwardGelu  dpre = gelu'(pre) ⊙ (dout · W)             the MLP's second layer's
//                                                                 backward, carried on through
//                                                                 the GELU before that layer
//   ResidualLayerNorm   r = a + b;  y = layernorm(r)               every residual add, with the
//                                                                 LayerNorm that follows it
//   ClassifierWithGrad  loss = cross_entropy(softmax(logits)),     the loss and the gradient of
//                       dlogits = d(scale · Σ loss) / d(logits)    the logits, in one call
//
// A stage that leaves a slot `Unfused` (train/policy.h) gets the composition below, built
// from its own single ops. These work on any backend: the CPU reference uses them too.
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace gpt {

// Whether an op's weight gradients follow the context's weight_gradient_beta: written in a step's
// first backward, added in the others (common/cuda/backend.cuh). An op says so next to its code
// (`static constexpr bool kWeightGradientsFollowBeta = true`, stage 00's CublasMatmul); one that
// does not is taken to add always, and the model then clears every gradient before a step.
template <class Op, class = void>
inline constexpr bool weight_gradients_follow_beta_v = false;
template <class Op>
inline constexpr bool weight_gradients_follow_beta_v<Op, std::void_t<decltype(Op::kWeightGradientsFollowBeta)>> =
    Op::kWeightGradientsFollowBeta;

}  // namespace gpt

namespace gpt::compose {

// y = gelu(inp · weightᵀ + bias); `pre` keeps inp · weightᵀ + bias for the backward pass.
// (Its backward is a plain Matmul backward from the gradient of `pre`, which MatmulBackwardGelu
// below has already carried through the GELU.)
template <class Matmul, class Gelu>
struct MatmulThenGelu {
    static constexpr const char* composed_of = "Matmul, then Gelu";

    template <class Ctx, class Act>
    static void forward(Ctx& ctx, Act* out, Act* pre, const Act* inp, const Act* weight, const Act* bias, int N,
                        int C, int OC) {
        Matmul::forward(ctx, pre, inp, weight, bias, N, C, OC);
        Gelu::forward(ctx, out, pre, size_t(N) * OC);
    }
};

// The backward of a linear layer whose input is gelu(pre), on through the GELU: dpre is the
// gradient of `pre` (not of the layer's input, gelu(pre)); dweight and dbias as Matmul's backward
// leaves them (added to, or dweight written in a step's first backward).
// Fused, the GELU's derivative is applied as the dinp matmul writes its result (stage 04), and
// the gradient of gelu(pre) never reaches memory.
template <class Matmul, class Gelu>
struct MatmulBackwardThenGelu {
    static constexpr const char* composed_of = "Matmul backward, then Gelu backward";
    static constexpr bool kWeightGradientsFollowBeta = weight_gradients_follow_beta_v<Matmul>;

    template <class Ctx, class Act>
    static void backward(Ctx& ctx, Act* dpre, float* dweight, float* dbias, const Act* dout, const Act* inp,
                         const Act* pre, const Act* weight, int N, int C, int OC) {
        Matmul::backward(ctx, dpre, dweight, dbias, dout, inp, weight, N, C, OC);  // dpre: d(gelu(pre)) for now
        Gelu::backward(ctx, dpre, pre, dpre, size_t(N) * C);
    }
};

// residual = a + b, then out = layernorm(residual) with its mean and rstd saved.
template <class Residual, class LayerNorm>
struct ResidualThenLayerNorm {
    static constexpr const char* composed_of = "Residual, then LayerNorm";

    template <class Ctx, class Act>
    static void forward(Ctx& ctx, Act* residual, Act* out, float* mean, float* rstd, const Act* a, const Act* b,
                        const Act* weight, const Act* bias, int N, int C) {
        Residual::forward(ctx, residual, a, b, size_t(N) * C);
        LayerNorm::forward(ctx, out, mean, rstd, residual, weight, bias, N, C);
    }
    // The backward of the add is free: the gradient of `residual` is the gradient of a and of b.
    // So this is LayerNorm's backward, which adds into dresidual (it already holds the gradient
    // that arrived around the LayerNorm, from later in the residual stream).
    template <class Ctx, class Act>
    static void backward(Ctx& ctx, Act* dresidual, float* dweight, float* dbias, const Act* dout,
                         const Act* residual, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        LayerNorm::backward(ctx, dresidual, dweight, dbias, dout, residual, weight, mean, rstd, N, C);
    }
};

// The classifier's forward (softmax, cross-entropy) and its backward, one after the other;
// dlogits may be the logits' own memory (the graph writes it there).
template <class Classifier>
struct ClassifierThenGrad {
    static constexpr const char* composed_of = "Classifier forward, then backward";

    static size_t saved_bytes(size_t N, size_t Vp, size_t act_bytes) {
        return Classifier::saved_bytes(N, Vp, act_bytes);
    }
    static size_t scratch_bytes(size_t N, size_t Vp, size_t act_bytes) {
        return Classifier::scratch_bytes(N, Vp, act_bytes);
    }
    template <class Ctx, class Act>
    static void forward_backward(Ctx& ctx, float* losses, Act* dlogits, const Act* logits, const int* targets,
                                 float dloss, int N, int V, int Vp, void* saved, void* scratch) {
        Classifier::forward(ctx, losses, saved, logits, targets, N, V, Vp, scratch);
        Classifier::backward(ctx, dlogits, saved, logits, targets, dloss, N, V, Vp, scratch);
    }
};

}  // namespace gpt::compose
