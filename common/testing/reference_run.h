// Runs the reference case (reference_case.h) on any stage policy: the step-0 loss and
// gradients, and the loss curve of the 20 overfitting steps. Used by the CPU reference's tests
// and by every GPU stage's tests, so they all train exactly the same way.
#pragma once
#include <vector>

#include "testing/reference_case.h"
#include "train/gpt.h"
#include "train/schedule.h"

namespace gpt::test {

struct Step0 {
    float loss = 0;
    std::vector<float> grads;  // file layout
};

template <class S>
Step0 reference_step0() {
    const ReferenceCase c = overfit_case();
    GPT<S> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    Step0 r;
    r.loss = model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
    model.backward();
    r.grads = model.gradients();
    return r;
}

struct Curve {
    std::vector<double> losses, grad_norms;
};

template <class S>
Curve reference_curve(const ReferenceSettings& s) {
    const ReferenceCase c = overfit_case();
    GPT<S> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    AdamWSettings adamw;
    adamw.beta1 = s.beta1;
    adamw.beta2 = s.beta2;
    adamw.eps = s.eps;
    adamw.weight_decay = s.weight_decay;
    adamw.grad_clip = s.grad_clip;
    Curve curve;
    for (int step = 0; step < s.steps; ++step) {
        // one batch, every step: the data loader over a B*T + 1 token shard repeats it
        curve.losses.push_back(model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T));
        model.backward();
        const float lr = learning_rate(step, s.steps, s.warmup, s.lr, s.min_lr_frac);
        curve.grad_norms.push_back(model.update(adamw, lr, step + 1));
    }
    return curve;
}

}  // namespace gpt::test
