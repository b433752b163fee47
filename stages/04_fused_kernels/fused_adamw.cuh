// Stage 04: AdamW over all parameters in one launch. Stage 02 launched its update once per
// parameter tensor, 16 launches a step, 10 of them over tensors of at most 37K elements at GPT-2
// 124M (biases, LayerNorm weights and biases): less than one wave of blocks each, a kernel that
// is over almost as soon as it has started, the GPU mostly waiting for the next one.
// Here one grid-stride kernel walks the flat parameter array, and each thread finds the tensor
// (and so the weight decay) of its elements in a table of the 16 tensors' ends, passed by value.
//
//   launches per step   stage 02: 1 memset + 1 norm + 16 updates = 18    stage 04: 3
//   bytes               the same: each parameter's weight, gradient and moments are read once, the
//                       weight, moments and bf16 copy written once, in either stage
//
// The arithmetic is stage 00's adamw_element, so the update is stage 02's bit for bit.
// PyTorch equivalent: torch.optim.AdamW(..., fused=True), which updates many tensors per launch.
#pragma once
#include <algorithm>

#include "../02_bf16_autocast/mixed_adamw.cuh"
#include "cuda/backend.cuh"
#include "model/params.h"
#include "train/optimizer.h"

namespace gpt::stage04 {

// Where each tensor ends in the flat array (sorted: tensors follow each other without gaps) and
// the weight decay it gets: 128 + 64 bytes, small enough to be a kernel argument.
struct TensorTable {
    size_t end[kNumParamTensors];  // one past the tensor's last element
    float weight_decay[kNumParamTensors];
};

constexpr unsigned kAdamWThreads = 256;

// Grid-stride: a thread's indices only grow, so its tensor only moves forward, and the setup
// (clip factor, learning rate, step) is done once per thread instead of once per element.
template <class Act>
__global__ void fused_adamw_kernel(float* params, Act* act_copy, const float* grads, float* m, float* v,
                                   size_t begin, size_t end, AdamWSettings s, TensorTable tensors,
                                   const StepScalars* step, const double* grad_sum_squares) {
    const float scale = stage00::device_clip_factor(grad_sum_squares, s);
    const float lr = step->lr;
    const int t = step->t;
    int tensor = 0;
    // [begin, end): the shard this process updates (all parameters with one process); m and v
    // hold the shard only.
    for (size_t i = begin + blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < end;
         i += size_t(gridDim.x) * blockDim.x) {
        while (i >= tensors.end[tensor]) ++tensor;  // stops at the last tensor at the latest: it ends the array
        s.weight_decay = tensors.weight_decay[tensor];
        float mi = m[i - begin], vi = v[i - begin];
        const float p = stage00::adamw_element(params[i], grads[i] * scale, mi, vi, lr, t, s);
        params[i] = p;
        act_copy[i] = from_float<Act>(p);
        m[i - begin] = mi;
        v[i - begin] = vi;
    }
}

// Stage 02's optimizer (memory, constructor, bf16 copy, gradient norm) with the one-launch update.
template <class Act>
class FusedAdamW : public stage02::MixedPrecisionAdamW<Act> {
    using Base = stage02::MixedPrecisionAdamW<Act>;

  public:
    static constexpr const char* source = __FILE__;

    using Base::Base;

    template <class AfterNorm = NothingAfterNorm>
    void step(CudaBackend::Context& ctx, const float* grads, const AdamWSettings& settings, const StepScalars* step,
              double* grad_sum_squares, AfterNorm&& after_norm = {}) {
        this->sum_of_squares(ctx, grad_sum_squares, grads);
        after_norm();
        // The table of every tensor's end and weight decay: the same decays stage 02 passes
        // tensor by tensor.
        TensorTable tensors{};
        const ParamLayout& layout = this->layout();
        for (int i = 0; i < kNumParamTensors; ++i) {
            tensors.end[i] = layout.offset[i] + layout.size[i];
            tensors.weight_decay[i] = ParamLayout::decays(i) ? settings.weight_decay : 0.0f;
        }
        const Shard& shard = this->shard();
        if (shard.count == 0) return;
        // As many blocks as are resident at once (one wave), and no more than there are elements for.
        const unsigned grid = std::min(cuda::ceil_div(shard.count, kAdamWThreads),
                                       cuda::one_wave(fused_adamw_kernel<Act>, kAdamWThreads, 0));
        fused_adamw_kernel<<<grid, kAdamWThreads, 0, ctx.stream>>>(this->master(), this->act_copy_.data(), grads,
                                                                   this->m(), this->v(), shard.begin, shard.end(),
                                                                   settings, tensors, step, grad_sum_squares);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage04
