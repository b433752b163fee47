// Stage 02: the optimizer of mixed precision. Besides stage 00's fp32 master weights and
// moments it owns a second copy of the weights in the activation type (bf16): the copy the
// forward and backward passes read, rewritten from the master weights at every update.
// Updating bf16 weights directly would lose every update smaller than half a bf16 step (2^-9 of
// the weight): a LayerNorm gain of 1.0 moved by 3e-4 per step would never move, and late in
// training, with a small learning rate, most updates of most weights are that small.
#pragma once
#include "../00_fp32_baseline/adamw.cuh"
#include "cuda/exercise.cuh"

namespace gpt::stage02 {

template <class Act>
__global__ void adamw_mixed_kernel(float* params, Act* act_copy, const float* grads, float* m, float* v, size_t n,
                                   AdamWSettings s, const StepScalars* step, const double* grad_sum_squares) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float scale = stage00::device_clip_factor(grad_sum_squares, s);
    // EXERCISE BEGIN stage02.mixed_precision_adamw TESTS Kernels.AdamW|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.MasterWeightsStayFp32
    float mi = m[i], vi = v[i];
    const float p = stage00::adamw_element(params[i], grads[i] * scale, mi, vi, step->lr, step->t, s);
    params[i] = p;                     // the master weight keeps every bit of the update
    act_copy[i] = from_float<Act>(p);  // the copy the matmuls read, rounded once
    m[i] = mi;
    v[i] = vi;
    // EXERCISE END
}

// The act_t copy of the master weights, all at once (when a checkpoint is loaded).
template <class Act>
__global__ void round_weights_kernel(Act* out, const float* in, size_t n) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = from_float<Act>(in[i]);
}

// The gradient norm is stage 00's; the update also writes the copy.
template <class Act>
class MixedPrecisionAdamW : public stage00::AdamW {
  public:
    using act_t = Act;
    static constexpr const char* source = __FILE__;

    MixedPrecisionAdamW(CudaBackend::Context& ctx, const ParamLayout& layout)
        : MixedPrecisionAdamW(ctx, layout, whole(layout.total())) {}
    MixedPrecisionAdamW(CudaBackend::Context& ctx, const ParamLayout& layout, const Shard& shard)
        : stage00::AdamW(ctx, layout, shard), act_copy_(shard.padded) {
        CudaBackend::fill_zero(ctx, act_copy_.data(), shard.padded);
        weights_changed(ctx);
    }

    static size_t memory_bytes(const ParamLayout& layout, const Shard& shard) {
        return stage00::AdamW::memory_bytes(layout, shard) + shard.padded * sizeof(Act);
    }

    const Act* act_weights() const { return act_copy_.data(); }
    Act* act_weights() { return act_copy_.data(); }

    void weights_changed(CudaBackend::Context& ctx) {
        round_weights_kernel<<<cuda::ceil_div(size(), 256), 256, 0, ctx.stream>>>(act_copy_.data(), master(),
                                                                                 size());
        LAUNCH_CHECK();
    }

    template <class AfterNorm = NothingAfterNorm>
    void step(CudaBackend::Context& ctx, const float* grads, const AdamWSettings& settings, const StepScalars* step,
              double* grad_sum_squares, AfterNorm&& after_norm = {}) {
        sum_of_squares(ctx, grad_sum_squares, grads);
        after_norm();
        for_each_tensor(settings, [&](size_t offset, size_t n, const AdamWSettings& tensor) {
            adamw_mixed_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(
                master() + offset, act_copy_.data() + offset, grads + offset, m_at(offset), v_at(offset), n, tensor,
                step, grad_sum_squares);
            LAUNCH_CHECK();
        });
    }

  protected:
    cuda::DeviceBuffer<Act> act_copy_;  // stage 04's one-launch update writes it too
};

}  // namespace gpt::stage02
