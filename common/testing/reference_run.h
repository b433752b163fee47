// Runs the reference case (reference_case.h) on any stage policy: the step-0 loss and
// gradients, and the loss curve of the 20 overfitting steps. Used by the CPU reference's tests
// and by every GPU stage's tests, so they all train exactly the same way.
#pragma once
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/shard.h"
#include "model/params.h"
#include "testing/reference_case.h"
#include "train/gpt.h"
#include "train/schedule.h"
#include "util/error.h"

namespace gpt::test {

struct Step0 {
    float loss = 0;
    std::vector<float> grads;  // file layout
};

// The case's one batch, as the data loader would give it.
inline Batch reference_batch(const ReferenceCase& c) {
    const size_t n = size_t(c.B) * c.T;
    return Batch{std::vector<int>(c.tokens.begin(), c.tokens.begin() + n),
                 std::vector<int>(c.tokens.begin() + 1, c.tokens.begin() + n + 1)};
}

template <class S>
Step0 reference_step0() {
    const ReferenceCase c = overfit_case();
    GPT<S> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    model.zero_grad();
    model.forward(c.tokens.data(), c.tokens.data() + 1, c.B, c.T);
    model.backward(1.0f / float(c.B * c.T));  // the gradient of the mean loss
    Step0 r;
    r.loss = model.sync().loss;
    r.grads = model.gradients();
    return r;
}

struct Curve {
    std::vector<double> losses, grad_norms;
};

// The optimizer settings of a reference run.
inline AdamWSettings adamw_settings(const ReferenceSettings& s) {
    AdamWSettings adamw;
    adamw.beta1 = s.beta1;
    adamw.beta2 = s.beta2;
    adamw.eps = s.eps;
    adamw.weight_decay = s.weight_decay;
    adamw.grad_clip = s.grad_clip;
    return adamw;
}

// s.steps steps of the reference run's schedule, each on the batch next_batch() returns.
template <class S, class NextBatch>
Curve train_curve(GPT<S>& model, const ReferenceSettings& s, int B, int T, NextBatch next_batch) {
    const AdamWSettings adamw = adamw_settings(s);
    Curve curve;
    for (int step = 0; step < s.steps; ++step) {
        const float lr = learning_rate(step, s.steps, s.warmup, s.lr, s.min_lr_frac);
        const StepResult r = model.train_step({next_batch()}, B, T, 1.0f / float(B * T), adamw, lr, step + 1);
        curve.losses.push_back(r.loss);
        curve.grad_norms.push_back(r.grad_norm);
    }
    return curve;
}

template <class S>
Curve reference_curve(const ReferenceSettings& s) {
    const ReferenceCase c = overfit_case();
    GPT<S> model(c.config, c.B, c.T);
    model.set_parameters(c.params);
    // one batch, every step: the data loader over a B*T + 1 token shard repeats it
    const Batch batch = reference_batch(c);
    return train_curve(model, s, c.B, c.T, [&] { return batch; });
}

// The full-size curve's run (reference_case.h): the model, data and settings of the committed
// d12 curve, batch after batch from the default corpus as the trainer draws them.
template <class S>
Curve full_size_curve(const ReferenceSettings& s, const std::string& data_dir) {
    const GPTConfig config = config_by_name(kFullSizeModel);
    GPT<S> model(config, s.batch, s.seq);
    model.set_parameters(init_parameters(config, kFullSizeSeed));
    DataLoader data(find_shards(data_dir, "train"), s.batch, s.seq, 0, 1, config.vocab_size);
    return train_curve(model, s, s.batch, s.seq, [&] { return data.next(); });
}

// One optimizer step of the reference case taken two ways: its batch of B sequences whole, and
// split into `k` micro-batches of B / k sequences whose gradients accumulate. Both weigh every
// position's loss 1 / (B·T), so they must agree up to the order of the additions.
struct StepOutcome {
    StepResult result;
    std::vector<float> grads, params;  // after the step, file layout
};
struct AccumulationRun {
    StepOutcome whole, accumulated;
};

template <class S>
AccumulationRun whole_and_accumulated(int k) {
    const ReferenceCase c = overfit_case();
    if (k < 1 || c.B % k != 0) throw Error("whole_and_accumulated: k must divide B = " + std::to_string(c.B));
    const Batch batch = reference_batch(c);
    const size_t micro_tokens = size_t(c.B / k) * c.T;
    std::vector<Batch> micro(k);
    for (int i = 0; i < k; ++i) {
        auto part = [&](const std::vector<int>& v) {
            return std::vector<int>(v.begin() + i * micro_tokens, v.begin() + (i + 1) * micro_tokens);
        };
        micro[i] = Batch{part(batch.inputs), part(batch.targets)};
    }
    const float loss_scale = 1.0f / float(c.B * c.T);
    const AdamWSettings adamw;
    auto run = [&](GPT<S>& model, const std::vector<Batch>& batches, int B) {
        model.set_parameters(c.params);
        StepOutcome o;
        o.result = model.train_step(batches, B, c.T, loss_scale, adamw, 1e-3f, 1);
        o.grads = model.gradients();
        o.params = model.parameters();
        return o;
    };
    AccumulationRun r;
    GPT<S> whole(c.config, c.B, c.T);
    r.whole = run(whole, {batch}, c.B);
    GPT<S> accumulated(c.config, c.B / k, c.T, k);
    r.accumulated = run(accumulated, micro, c.B / k);
    return r;
}

}  // namespace gpt::test
