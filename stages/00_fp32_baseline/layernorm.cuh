// Stage 00: LayerNorm, one thread per row — the first version anyone writes. Statistics are
// always computed in float, whatever the activation type (stage 02 relies on that).
#pragma once
#include "cuda/backend.cuh"
#include "cuda/exercise.cuh"
#include "elementwise.cuh"  // kRowsPerChunk

namespace gpt::stage00 {

constexpr float kLayerNormEps = 1e-5f;

// out = (x - mean) * rstd * weight + bias for one row of C values per thread; saves mean and
// rstd (1 / standard deviation) for the backward pass.
template <class Act>
__global__ void layernorm_forward_kernel(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                                         const Act* bias, int N, int C) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    // EXERCISE BEGIN stage00.layernorm_forward TESTS Kernels.LayerNormForward|Slots.ResidualLayerNormForward|Model.Step0LossAndGradients|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.CachedGenerationMatchesTheFullForward|Model.MasterWeightsStayFp32|Model.GradientAccumulation|Model.FirstBackwardWritesTheGradients|Model.LossInChunksMatchesTheCpu|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero|Model.PaddingChangesNothing
    const Act* x = inp + size_t(n) * C;
    float m = 0.0f;
    for (int c = 0; c < C; ++c) m += to_float(x[c]);
    m /= C;
    float var = 0.0f;  // biased variance (divide by C), as torch.nn.LayerNorm
    for (int c = 0; c < C; ++c) {
        const float d = to_float(x[c]) - m;
        var += d * d;
    }
    var /= C;
    const float s = rsqrtf(var + kLayerNormEps);
    Act* o = out + size_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = from_float<Act>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    mean[n] = m;
    rstd[n] = s;
    // EXERCISE END
}

// dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, one row per
// thread. It adds (+=): the residual stream's gradient arrives through this branch and around it.
template <class Act>
__global__ void layernorm_backward_input_kernel(Act* dinp, const Act* dout, const Act* inp, const Act* weight,
                                                const float* mean, const float* rstd, int N, int C) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const Act* x = inp + size_t(n) * C;
    const Act* d = dout + size_t(n) * C;
    float g_mean = 0.0f, gx_mean = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
        const float g = to_float(d[c]) * to_float(weight[c]);
        g_mean += g;
        gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    Act* dx = dinp + size_t(n) * C;
    for (int c = 0; c < C; ++c) {
        const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
        const float g = to_float(d[c]) * to_float(weight[c]);
        dx[c] = from_float<Act>(to_float(dx[c]) + rstd[n] * (g - g_mean - xhat * gx_mean));
    }
}

// dweight[c] += sum_n dout * xhat, dbias[c] += sum_n dout: per column over a chunk of rows,
// partial sums added with atomicAdd (see column_sum in elementwise.cuh).
template <class Act>
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const Act* dout, const Act* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int row0 = blockIdx.y * kRowsPerChunk, row1 = min(N, row0 + kRowsPerChunk);
    float dw = 0.0f, db = 0.0f;
    for (int n = row0; n < row1; ++n) {
        const float d = to_float(dout[size_t(n) * C + c]);
        dw += d * (to_float(inp[size_t(n) * C + c]) - mean[n]) * rstd[n];
        db += d;
    }
    atomicAdd(&dweight[c], dw);
    atomicAdd(&dbias[c], db);
}

struct LayerNorm {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                        const Act* weight, const Act* bias, int N, int C) {
        layernorm_forward_kernel<<<cuda::ceil_div(N, 256), 256, 0, ctx.stream>>>(out, mean, rstd, inp, weight, bias,
                                                                                  N, C);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, const float* mean, const float* rstd, int N, int C) {
        layernorm_backward_input_kernel<<<cuda::ceil_div(N, 256), 256, 0, ctx.stream>>>(dinp, dout, inp, weight, mean,
                                                                                         rstd, N, C);
        LAUNCH_CHECK();
        const dim3 grid(cuda::ceil_div(C, 256), cuda::ceil_div(N, kRowsPerChunk));
        layernorm_backward_params_kernel<<<grid, 256, 0, ctx.stream>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage00
