// What every optimizer of the project shares: its settings, the per-step values it reads from
// device memory, and the memory it owns (fp32 master weights and AdamW's two moments).
//
// An optimizer (the policy's `Optimizer`, e.g. stages/00_fp32_baseline/adamw.cuh) owns the
// parameters: the graph reads the weights it is given by `act_weights()` and hands back
// gradients; one call, `step()`, computes the gradient norm, the clip factor and the AdamW
// update of every parameter, without the host waiting for the device.
#pragma once
#include <cstddef>

#include "model/params.h"

// Functions that run on the host and in kernels alike.
#ifdef __CUDACC__
#define GPT_HOST_DEVICE __host__ __device__
#else
#define GPT_HOST_DEVICE
#endif

namespace gpt {

// The settings of torch.optim.AdamW and of gradient clipping, constant over a run.
struct AdamWSettings {
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;  // for the tensors that decay (ParamLayout::decays); 0 for the others
    float grad_clip = 1.0f;     // clip the global gradient norm to this (0: no clipping)
};

// The factor every gradient is multiplied by so that their global norm is at most grad_clip:
// min(1, grad_clip / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_. 1 when clipping is off.
GPT_HOST_DEVICE inline float clip_factor(float norm, float grad_clip) {
    if (!(grad_clip > 0.0f)) return 1.0f;
    const float f = grad_clip / (norm + 1e-6f);
    return f < 1.0f ? f : 1.0f;
}

// What changes from step to step. It lives in device memory and the kernels read it from there,
// so that a step captured once (a CUDA Graph) can be replayed with a new learning rate and step.
struct StepScalars {
    float lr;
    int t;  // AdamW's step count, from 1
};

// Storage of an optimizer, in the backend's memory: fp32 master weights and the moments m and
// v, in the padded parameter layout. `Backend` supplies Context, Buffer and fill_zero.
template <class Backend>
class OptimizerState {
  public:
    OptimizerState(typename Backend::Context& ctx, const ParamLayout& layout)
        : layout_(layout), master_(layout.total()), m_(layout.total()), v_(layout.total()) {
        for (float* p : {master_.data(), m_.data(), v_.data()}) Backend::fill_zero(ctx, p, layout.total());
    }

    // The memory an optimizer of this layout holds, before it exists (train/memory.h). An
    // optimizer that owns more (a copy of the weights in act_t) hides this with its own.
    static size_t memory_bytes(const ParamLayout& layout) { return 3 * layout.total() * sizeof(float); }

    const ParamLayout& layout() const { return layout_; }
    size_t size() const { return layout_.total(); }
    float* master() { return master_.data(); }
    const float* master() const { return master_.data(); }
    float* m() { return m_.data(); }
    float* v() { return v_.data(); }

    // Called after the master weights were written from outside (loading a checkpoint). An
    // optimizer that keeps another copy of the weights refreshes it here.
    void weights_changed(typename Backend::Context&) {}

  protected:
    // Calls update(offset, n, settings) for each parameter tensor, with the weight decay that
    // tensor gets (none for biases and LayerNorm parameters).
    template <class Update>
    void for_each_tensor(const AdamWSettings& settings, Update&& update) const {
        for (int i = 0; i < kNumParamTensors; ++i) {
            AdamWSettings tensor = settings;
            if (!ParamLayout::decays(i)) tensor.weight_decay = 0.0f;
            update(layout_.offset[i], layout_.size[i], tensor);
        }
    }

  private:
    ParamLayout layout_;
    typename Backend::template Buffer<float> master_, m_, v_;
};

}  // namespace gpt
