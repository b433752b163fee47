// What every optimizer of the project shares: its settings, the per-step values it reads from
// device memory, and the memory it owns (fp32 master weights and AdamW's two moments).
//
// An optimizer (the policy's `Optimizer`, e.g. stages/00_fp32_baseline/adamw.cuh) owns the
// parameters: the graph reads the weights it is given by `act_weights()` and hands back
// gradients; one call, `step()`, computes the gradient norm, the clip factor and the AdamW
// update of every parameter, without the host waiting for the device.
#pragma once
#include <algorithm>
#include <cstddef>

#include "model/params.h"
#include "train/parallel.h"

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

// What an optimizer does between the gradient norm and the update by default: nothing. (A
// sharded optimizer's norm is summed over the processes there: GPT::enqueue_update, train/gpt.h.)
struct NothingAfterNorm {
    void operator()() const {}
};

// Storage of an optimizer, in the backend's memory: fp32 master weights and the moments m and
// v, in the padded parameter layout. `Backend` supplies Context, Buffer and fill_zero.
//
// With ZeRO-1 (stage 06) a process keeps m and v of its shard only (train/parallel.h), and
// updates only the weights of its shard; the weights (padded to the shard size times the
// processes) are then gathered from all processes.
template <class Backend>
class OptimizerState {
  public:
    OptimizerState(typename Backend::Context& ctx, const ParamLayout& layout)
        : OptimizerState(ctx, layout, whole(layout.total())) {}
    OptimizerState(typename Backend::Context& ctx, const ParamLayout& layout, const Shard& shard)
        : layout_(layout), shard_(shard), master_(shard.padded), m_(moments(shard)), v_(moments(shard)) {
        Backend::fill_zero(ctx, master_.data(), shard.padded);
        for (float* p : {m_.data(), v_.data()}) Backend::fill_zero(ctx, p, moments(shard));
    }

    // The memory an optimizer of this layout and shard holds, before it exists (train/memory.h):
    // what the constructor allocates. An optimizer that owns more (a copy of the weights in
    // act_t) hides this with its own.
    static size_t memory_bytes(const ParamLayout&, const Shard& shard) {
        return (shard.padded + 2 * moments(shard)) * sizeof(float);
    }

    const ParamLayout& layout() const { return layout_; }
    const Shard& shard() const { return shard_; }
    size_t size() const { return layout_.total(); }
    float* master() { return master_.data(); }
    const float* master() const { return master_.data(); }
    // The moments of the shard: element i of the flat array is at m()[i - shard().begin].
    float* m() { return m_.data(); }
    float* v() { return v_.data(); }

    // Called after the master weights were written from outside (loading a checkpoint). An
    // optimizer that keeps another copy of the weights refreshes it here.
    void weights_changed(typename Backend::Context&) {}

  protected:
    // Calls update(offset, n, settings) for each parameter tensor's part of the shard (offset in
    // the flat array), with the weight decay that tensor gets (none for biases and LayerNorm
    // parameters).
    template <class Update>
    void for_each_tensor(const AdamWSettings& settings, Update&& update) const {
        for (int i = 0; i < kNumParamTensors; ++i) {
            const size_t begin = std::max(layout_.offset[i], shard_.begin);
            const size_t end = std::min(layout_.offset[i] + layout_.size[i], shard_.end());
            if (begin >= end) continue;
            AdamWSettings tensor = settings;
            if (!ParamLayout::decays(i)) tensor.weight_decay = 0.0f;
            update(begin, end - begin, tensor);
        }
    }
    float* m_at(size_t offset) { return m_.data() + (offset - shard_.begin); }
    float* v_at(size_t offset) { return v_.data() + (offset - shard_.begin); }

  private:
    static size_t moments(const Shard& shard) { return std::max<size_t>(1, shard.count); }  // an address even if empty

    ParamLayout layout_;
    Shard shard_;
    typename Backend::template Buffer<float> master_, m_, v_;
};

}  // namespace gpt
