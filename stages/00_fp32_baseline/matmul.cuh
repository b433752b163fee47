// Stage 00: the linear layers, y = x Wᵀ + b, on cuBLAS(Lt) with a separate bias kernel.
// The arithmetic comes from the context, which takes it from the stage's precision: for FP32
// (defined here) CUBLAS_COMPUTE_32F, which for fp32 data means plain fp32 arithmetic, no tensor
// cores. Stage 01 declares another precision and these matmuls follow, unchanged.
#pragma once
#include "cuda/backend.cuh"
#include "elementwise.cuh"

namespace gpt::cuda {
template <>
struct MatmulMath<Precision::FP32> {
    static constexpr cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // fp32 math, no TF32
    static constexpr const char* source = __FILE__;
};
}  // namespace gpt::cuda

namespace gpt::stage00 {

// out[n, :] += bias, a 16-byte pack a thread (elementwise.cuh says why). OC % kVec == 0, so a
// pack never straddles two rows.
template <int kVec, class Act>
__global__ void add_bias_kernel(Act* out, const Act* bias, int N, int OC) {
    using P = Pack<Act, kVec>;
    const size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * kVec;  // the pack's first element
    if (i >= size_t(N) * OC) return;
    P o = load_pack<P>(out + i, 0);
    const P b = load_pack<P>(bias + i % OC, 0);
#pragma unroll
    for (int k = 0; k < kVec; ++k) o.v[k] = from_float<Act>(to_float(o.v[k]) + to_float(b.v[k]));
    store_pack(out + i, 0, o);
}

template <class Act>
void add_bias(cudaStream_t stream, Act* out, const Act* bias, int N, int OC) {
    const size_t n = size_t(N) * OC;
    if (n == 0) return;
    constexpr int kVec = kPackElements<Act>;
    if (OC % kVec == 0 && aligned16(out) && aligned16(bias))
        add_bias_kernel<kVec><<<element_blocks(n, kVec), kElementThreads, 0, stream>>>(out, bias, N, OC);
    else
        add_bias_kernel<1><<<element_blocks(n, 1), kElementThreads, 0, stream>>>(out, bias, N, OC);
    LAUNCH_CHECK();
}

struct CublasMatmul {
    static constexpr const char* source = __FILE__;
    static constexpr bool kWeightGradientsFollowBeta = true;  // weight_gradient() below (train/policy.h)

    // out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]  (bias may be null)
    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, const Act* weight, const Act* bias,
                        int N, int C, int OC) {
        product(ctx, out, inp, weight, N, C, OC);
        if (bias) add_bias(ctx.stream, out, bias, N, OC);
    }

    // dinp = dout · weight;  dweight += doutᵀ · inp (fp32 gradients; = in a step's first backward,
    // weight_gradient below);  dbias += column sums of dout
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, float* dweight, float* dbias, const Act* dout,
                         const Act* inp, const Act* weight, int N, int C, int OC) {
        input_gradient(ctx, dinp, dout, weight, N, C, OC);
        weight_gradient(ctx, dweight, dout, inp, N, C, OC);
        if (dbias) column_sum(ctx, dbias, dout, N, OC);
    }

    // The three products alone. Stage 04 finishes each with a cuBLASLt epilogue (cuda/gemm.cuh),
    // and they return false where cuBLASLt has none for it; without one they always run.
    template <class Act>
    static bool product(CudaBackend::Context& ctx, Act* out, const Act* inp, const Act* weight, int N, int C, int OC,
                        const cuda::Epilogue& epilogue = {}) {  // out = inp · weightᵀ
        return ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, true, N, OC, C, 1.0f, inp, C, weight, C, 0.0f,
                             out, OC, 1, 0, 0, 0, epilogue);
    }
    template <class Act>
    static bool input_gradient(CudaBackend::Context& ctx, Act* dinp, const Act* dout, const Act* weight, int N, int C,
                               int OC, const cuda::Epilogue& epilogue = {}) {  // dinp = dout · weight
        return ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f,
                             dinp, C, 1, 0, 0, 0, epilogue);
    }
    // dweight += doutᵀ · inp, or dweight = doutᵀ · inp in a step's first backward (the context's
    // weight_gradient_beta, common/cuda/backend.cuh): then the gradients need no zeroing first.
    template <class Act>
    static bool weight_gradient(CudaBackend::Context& ctx, float* dweight, const Act* dout, const Act* inp, int N,
                                int C, int OC, const cuda::Epilogue& epilogue = {}) {
        return ctx.gemm.gemm(ctx.stream, ctx.matmul_compute, true, false, OC, C, N, 1.0f, dout, OC, inp, C,
                             ctx.weight_gradient_beta, dweight, C, 1, 0, 0, 0, epilogue);
    }
};

}  // namespace gpt::stage00
