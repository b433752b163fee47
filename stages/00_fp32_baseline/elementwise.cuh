// Stage 00: the one-thread-per-element ops — embeddings, residual add, GELU — and the column
// sums that parameter gradients need. Templates on the activation type `Act` (float here;
// stage 02 instantiates the same kernels in bf16): loads convert to float, math is in float.
#pragma once
#include "cuda/backend.cuh"

namespace gpt::stage00 {

// ---- embeddings: out[b,t,:] = wte[token,:] + wpe[t,:] ------------------------------------

template <class Act>
__global__ void embedding_forward_kernel(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T,
                                         int C) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= size_t(B) * T * C) return;
    const int c = i % C;
    const size_t bt = i / C;
    const int t = bt % T;
    out[i] = from_float<Act>(to_float(wte[size_t(tokens[bt]) * C + c]) + to_float(wpe[size_t(t) * C + c]));
}

// dwte: positions holding the same token add into the same row, so threads use atomicAdd
// (the order of the additions, and so the last bits, can change from run to run).
template <class Act>
__global__ void embedding_backward_wte_kernel(float* dwte, const Act* dout, const int* tokens, int N, int C) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= size_t(N) * C) return;
    const int c = i % C;
    atomicAdd(&dwte[size_t(tokens[i / C]) * C + c], to_float(dout[i]));
}

// dwpe[t,c] = sum over the batch: one thread per (t, c), no atomics needed.
template <class Act>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const Act* dout, int B, int T, int C) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= size_t(T) * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += to_float(dout[size_t(b) * T * C + i]);
    dwpe[i] += sum;
}

struct Embedding {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const int* tokens, const Act* wte, const Act* wpe, int B,
                        int T, int C) {
        const size_t n = size_t(B) * T * C;
        embedding_forward_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(out, tokens, wte, wpe, B, T, C);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, float* dwte, float* dwpe, const Act* dout, const int* tokens,
                         int B, int T, int C) {
        const size_t n = size_t(B) * T * C;
        embedding_backward_wte_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(dwte, dout, tokens, B * T, C);
        LAUNCH_CHECK();
        embedding_backward_wpe_kernel<<<cuda::ceil_div(size_t(T) * C, 256), 256, 0, ctx.stream>>>(dwpe, dout, B, T, C);
        LAUNCH_CHECK();
    }
};

// ---- residual: out = a + b ------------------------------------------------------------------

template <class Act>
__global__ void residual_forward_kernel(Act* out, const Act* a, const Act* b, size_t n) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = from_float<Act>(to_float(a[i]) + to_float(b[i]));
}

// The backward of an add is "pass the gradient to both inputs": the model graph gets that for
// free (see common/cpu/ops.h), so there is no residual backward kernel.
struct Residual {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* a, const Act* b, size_t n) {
        residual_forward_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(out, a, b, n);
        LAUNCH_CHECK();
    }
};

// ---- GELU, tanh approximation ----------------------------------------------------------------

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

template <class Act>
__global__ void gelu_forward_kernel(Act* out, const Act* inp, size_t n) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float x = to_float(inp[i]);
    out[i] = from_float<Act>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x))));
}

template <class Act>
__global__ void gelu_backward_kernel(Act* dinp, const Act* inp, const Act* dout, size_t n) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float x = to_float(inp[i]);
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_float<Act>(to_float(dout[i]) * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du));
}

struct Gelu {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, size_t n) {
        gelu_forward_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(out, inp, n);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, const Act* inp, const Act* dout, size_t n) {
        gelu_backward_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(dinp, inp, dout, n);
        LAUNCH_CHECK();
    }
};

// ---- column sums: out[c] += sum over rows of x[row, c] -----------------------------------------

// Gradients of biases (and of LayerNorm's bias) sum the output gradient over all N rows. One
// thread per column would leave the GPU almost idle (C threads for N·C numbers), so each
// thread sums one column over a chunk of rows and adds its partial sum with atomicAdd.
constexpr int kRowsPerChunk = 64;

template <class Act>
__global__ void column_sum_kernel(float* out, const Act* x, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int row0 = blockIdx.y * kRowsPerChunk, row1 = min(N, row0 + kRowsPerChunk);
    float sum = 0.0f;
    for (int n = row0; n < row1; ++n) sum += to_float(x[size_t(n) * C + c]);
    atomicAdd(&out[c], sum);
}

template <class Act>
void column_sum(CudaBackend::Context& ctx, float* out, const Act* x, int N, int C) {
    const dim3 grid(cuda::ceil_div(C, 256), cuda::ceil_div(N, kRowsPerChunk));
    column_sum_kernel<<<grid, 256, 0, ctx.stream>>>(out, x, N, C);
    LAUNCH_CHECK();
}

}  // namespace gpt::stage00
