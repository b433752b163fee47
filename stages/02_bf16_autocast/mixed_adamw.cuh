// Stage 02: AdamW for mixed precision. The optimizer updates the fp32 master weights and then
// writes the bf16 copy that the forward and backward passes read. Updating bf16 weights directly
// would lose every update smaller than half a bf16 step (2^-9 of the weight): a LayerNorm gain
// of 1.0 moved by 3e-4 per step would never move, and late in training, with a small learning
// rate, most updates of most weights are that small.
#pragma once
#include "../00_fp32_baseline/adamw.cuh"
#include "cuda/exercise.cuh"

namespace gpt::stage02 {

template <class Act>
__global__ void adamw_mixed_kernel(float* params, Act* act_copy, const float* grads, float* m, float* v, size_t n,
                                   float lr, float beta1, float beta2, float eps, float weight_decay, float bias1,
                                   float bias2, float grad_scale) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    // EXERCISE BEGIN stage02.mixed_precision_adamw TESTS Kernels.AdamW|Model.LossCurveMatchesPyTorch|Model.MasterWeightsStayFp32
    float mi = m[i], vi = v[i];
    const float p = stage00::adamw_element(params[i], grads[i] * grad_scale, mi, vi, lr, beta1, beta2, eps,
                                           weight_decay, bias1, bias2);
    params[i] = p;                     // the master weight keeps every bit of the update
    act_copy[i] = from_float<Act>(p);  // the copy the matmuls read, rounded once
    m[i] = mi;
    v[i] = vi;
    // EXERCISE END
}

// The gradient norm is stage 00's; only the update differs.
struct MixedPrecisionAdamW : stage00::AdamW {
    template <class Act>
    static void adamw(CudaBackend::Context& ctx, float* params, Act* act_copy, const float* grads, float* m,
                      float* v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                      float grad_scale) {
        const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
        const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
        adamw_mixed_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(
            params, act_copy, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage02
