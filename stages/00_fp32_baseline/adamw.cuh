// Stage 00: the optimizer. It owns the fp32 weights and AdamW's moments (train/optimizer.h),
// and one call, step(), does the whole update on the device:
//   1. the squared global gradient norm: one launch over all gradients, into device memory
//   2. AdamW, one thread per parameter and one launch per parameter tensor (stage 04 makes it
//      one launch for all); each thread derives the clip factor from that norm and reads the
//      learning rate and step count from device memory, so the host never waits for the norm.
#pragma once
#include "cuda/backend.cuh"
#include "train/optimizer.h"

namespace gpt::stage00 {

// AdamW's correction of a moment's bias towards 0 after t steps, 1 - beta^t: the same for every
// parameter of a step (stage 04's kernel, many parameters a thread, computes it once per thread).
__device__ inline float bias_correction(float beta, int t) { return 1.0f - powf(beta, static_cast<float>(t)); }

// torch.optim.AdamW for one parameter, as in docs/formats.md: updates m and v in place and
// returns the new value of the (fp32 master) weight. g is the gradient after clipping; bias1 and
// bias2 are the bias corrections of the two moments at this step. The multiply-adds are spelled
// out as fmaf: left to the compiler, a·b + c·d may become fma(a, b, c·d) in one kernel and
// fma(c, d, a·b) in another, and the kernels sharing this function would differ in the last bit.
__device__ inline float adamw_element(float p, float g, float& m, float& v, float lr, float bias1, float bias2,
                                      const AdamWSettings& s) {
    p = fmaf(-lr * s.weight_decay, p, p);            // p - lr·wd·p: decoupled weight decay
    m = fmaf(s.beta1, m, (1.0f - s.beta1) * g);      // beta1·m + (1 - beta1)·g
    v = fmaf(s.beta2, v, (1.0f - s.beta2) * g * g);  // beta2·v + (1 - beta2)·g²
    return p - lr * (m / bias1) / (sqrtf(v / bias2) + s.eps);
}

// The same at step t, with the bias corrections worked out for this one parameter (a thread per
// parameter, stages 00-03).
__device__ inline float adamw_element(float p, float g, float& m, float& v, float lr, int t, const AdamWSettings& s) {
    return adamw_element(p, g, m, v, lr, bias_correction(s.beta1, t), bias_correction(s.beta2, t), s);
}

// The factor that clips this step's gradients, from their sum of squares on the device.
__device__ inline float device_clip_factor(const double* grad_sum_squares, const AdamWSettings& s) {
    return clip_factor(static_cast<float>(sqrt(*grad_sum_squares)), s.grad_clip);
}

// One tensor's update; the gradients stay as backward() left them (clipping scales each one as
// it is read). `static`, as every non-template kernel in a header: two files may include it.
static __global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n,
                                    AdamWSettings s, const StepScalars* step, const double* grad_sum_squares) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float scale = device_clip_factor(grad_sum_squares, s);
    float mi = m[i], vi = v[i];
    params[i] = adamw_element(params[i], grads[i] * scale, mi, vi, step->lr, step->t, s);
    m[i] = mi;
    v[i] = vi;
}

class AdamW : public OptimizerState<CudaBackend> {
  public:
    using act_t = float;  // the forward and backward passes read the fp32 master weights themselves
    static constexpr const char* source = __FILE__;

    using OptimizerState::OptimizerState;

    const float* act_weights() const { return master(); }
    float* act_weights() { return master(); }

    // Writes the squared gradient norm to *grad_sum_squares (device memory) and updates every
    // parameter (of the shard). lr and t are read from *step (device memory) when the kernels
    // run. after_norm() is queued in between (ZeRO-1 sums the norm over the processes there).
    template <class AfterNorm = NothingAfterNorm>
    void step(CudaBackend::Context& ctx, const float* grads, const AdamWSettings& settings, const StepScalars* step,
              double* grad_sum_squares, AfterNorm&& after_norm = {}) {
        sum_of_squares(ctx, grad_sum_squares, grads);
        after_norm();
        for_each_tensor(settings, [&](size_t offset, size_t n, const AdamWSettings& tensor) {
            adamw_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(master() + offset, grads + offset,
                                                                         m_at(offset), v_at(offset), n, tensor, step,
                                                                         grad_sum_squares);
            LAUNCH_CHECK();
        });
    }

  protected:
    // Of the shard's gradients. Each block sums its part in float and adds it into a double with
    // one atomicAdd.
    void sum_of_squares(CudaBackend::Context& ctx, double* out, const float* grads) {
        CudaBackend::fill_zero(ctx, out, 1);
        if (shard().count == 0) return;
        cuda::sum_into(ctx.stream, out, grads + shard().begin, shard().count, cuda::Square{});
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
