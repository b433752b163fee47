// Stage 00: the optimizer — the global gradient norm (for clipping) and AdamW, one thread per
// parameter, one launch per parameter tensor (stage 04 makes it one launch for all). Clipping
// itself is a factor the AdamW kernel applies to each gradient as it reads it.
#pragma once
#include <algorithm>
#include <cmath>

#include "cuda/backend.cuh"

namespace gpt::stage00 {

// Sum of squares: each block reduces its part, then one atomicAdd per block into a double.
__global__ void sum_squares_kernel(double* out, const float* x, size_t n) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        sum += x[i] * x[i];
    sum = cuda::block_sum(sum, shared);
    if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(sum));
}

// torch.optim.AdamW for one parameter, as in docs/formats.md: updates m and v in place and
// returns the new value of the (fp32 master) weight. bias1/bias2 = 1 - beta^t.
__device__ inline float adamw_element(float p, float g, float& m, float& v, float lr, float beta1, float beta2,
                                      float eps, float weight_decay, float bias1, float bias2) {
    p -= lr * weight_decay * p;  // decoupled weight decay
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    return p - lr * (m / bias1) / (sqrtf(v / bias2) + eps);
}

// grad_scale is the clipping factor, min(1, clip / (norm + 1e-6)): the gradients themselves stay as
// backward() left them.
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bias1, float bias2, float grad_scale) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    float mi = m[i], vi = v[i];
    params[i] = adamw_element(params[i], grads[i] * grad_scale, mi, vi, lr, beta1, beta2, eps, weight_decay, bias1,
                              bias2);
    m[i] = mi;
    v[i] = vi;
}

struct AdamW {
    static double sum_squares(CudaBackend::Context& ctx, const float* grads, size_t n) {
        double* sum = ctx.reduction.data();
        CUDA_CHECK(cudaMemsetAsync(sum, 0, sizeof(double), ctx.stream));
        sum_squares_kernel<<<std::min<unsigned>(cuda::ceil_div(n, 256), 1024), 256, 0, ctx.stream>>>(sum, grads, n);
        LAUNCH_CHECK();
        double host = 0.0;
        CudaBackend::copy_out(ctx, &host, sum, 1);
        return host;
    }
    // act_copy: a second, lower-precision copy of the weights to refresh; stage 00 has none
    // (its activations are fp32, so the master weights are used directly) and gets null.
    static void adamw(CudaBackend::Context& ctx, float* params, float* act_copy, const float* grads, float* m,
                      float* v, size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                      float grad_scale) {
        if (act_copy) throw Error("stage 00's AdamW keeps no second copy of the weights");
        const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
        const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
        adamw_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(params, grads, m, v, n, lr, beta1, beta2, eps,
                                                                     weight_decay, bias1, bias2, grad_scale);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
