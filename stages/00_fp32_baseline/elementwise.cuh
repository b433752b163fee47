// Stage 00: the element-wise ops — embeddings, residual add, GELU — and the column sums that
// parameter gradients need. Templates on the activation type `Act` (float here; stage 02
// instantiates the same kernels in bf16): loads convert to float, math is in float.
//
// The embedding's forward, the residual add and GELU give each thread one 16-byte pack of each
// array, 4 floats or 8 bf16, as eager PyTorch's element-wise kernels do. They do a few FLOPs per
// element and wait on memory, which answers a load about a microsecond after it is issued: to
// keep the memory bus busy, the SMs must hold a microsecond's worth of bytes in flight (Little's
// law: bytes in flight = bandwidth × latency, about 4 MB on an H200). An SM runs at most 2048
// threads. One float a thread puts 8 KB an SM in flight, 1 MB on 132 SMs, a quarter of that; a
// 16-byte pack a thread, four times as much. (The first version, one element a thread, is kept
// as a benchmark variant: tests/bench/first_versions.cuh.)
#pragma once
#include "cuda/backend.cuh"

namespace gpt::stage00 {

constexpr int kElementThreads = 256;  // threads per block of the element-wise kernels

// Elements per 16-byte pack.
template <class Act>
constexpr int kPackElements = 16 / sizeof(Act);

// Thread i of these kernels takes elements [i · kVec, i · kVec + kVec): one pack, or one element
// (kVec = 1) where an array does not start on a 16-byte boundary or a row's length is not a
// multiple of kVec. The blocks n elements need:
inline unsigned element_blocks(size_t n, int kVec) { return cuda::ceil_div(n, unsigned(kVec) * kElementThreads); }

// ---- embeddings: out[b,t,:] = wte[token,:] + wpe[t,:] ------------------------------------

// C % kVec == 0, so a pack never straddles two rows.
template <int kVec, class Act>
__global__ void embedding_forward_kernel(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T,
                                         int C) {
    using P = Pack<Act, kVec>;
    const size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * kVec;  // the pack's first element
    if (i >= size_t(B) * T * C) return;
    const int c = i % C;
    const size_t bt = i / C;
    const int t = bt % T;
    const P w = load_pack<P>(wte + size_t(tokens[bt]) * C + c, 0), p = load_pack<P>(wpe + size_t(t) * C + c, 0);
    P o;
#pragma unroll
    for (int k = 0; k < kVec; ++k) o.v[k] = from_float<Act>(to_float(w.v[k]) + to_float(p.v[k]));
    store_pack(out + i, 0, o);
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
        if (n == 0) return;  // a grid of no blocks is a launch error
        constexpr int kVec = kPackElements<Act>;
        if (C % kVec == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe))
            embedding_forward_kernel<kVec><<<element_blocks(n, kVec), kElementThreads, 0, ctx.stream>>>(
                out, tokens, wte, wpe, B, T, C);
        else
            embedding_forward_kernel<1><<<element_blocks(n, 1), kElementThreads, 0, ctx.stream>>>(out, tokens, wte,
                                                                                                  wpe, B, T, C);
        LAUNCH_CHECK();
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, float* dwte, float* dwpe, const Act* dout, const int* tokens,
                         int B, int T, int C) {
        const size_t n = size_t(B) * T * C;
        if (n == 0) return;
        embedding_backward_wte_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(dwte, dout, tokens, B * T, C);
        LAUNCH_CHECK();
        embedding_backward_wpe_kernel<<<cuda::ceil_div(size_t(T) * C, 256), 256, 0, ctx.stream>>>(dwpe, dout, B, T, C);
        LAUNCH_CHECK();
    }
};

// ---- out = op(a, b), element by element -----------------------------------------------------------

// The kernel of the residual add and of GELU forward and backward: out[i] = op(a[i], b[i]) for i
// < n, in float. b is null for an op of one input (op then ignores its second argument). out may
// be a or b (the same array, not one that overlaps it elsewhere): a thread reads its elements
// before it writes them.
template <int kVec, class Act, class Op>
__global__ void elementwise_kernel(Act* out, const Act* a, const Act* b, size_t n, Op op) {
    using P = Pack<Act, kVec>;
    const size_t i = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * kVec;  // the pack's first element
    if (i >= n) return;
    if (i + kVec <= n) {
        const P x = load_pack<P>(a + i, 0), y = b ? load_pack<P>(b + i, 0) : P{};
        P r;
#pragma unroll
        for (int k = 0; k < kVec; ++k) r.v[k] = from_float<Act>(op(to_float(x.v[k]), to_float(y.v[k])));
        store_pack(out + i, 0, r);
    } else {  // the last n % kVec elements, one at a time
        for (size_t j = i; j < n; ++j) out[j] = from_float<Act>(op(to_float(a[j]), b ? to_float(b[j]) : 0.0f));
    }
}

// Packs of 16 bytes where every array starts on a 16-byte boundary (cudaMalloc's do, and so do
// the model's activations); one element a thread otherwise, or with packs = false (the first
// version, for the benchmark).
template <class Act, class Op>
void elementwise(cudaStream_t stream, Act* out, const Act* a, const Act* b, size_t n, Op op, bool packs = true) {
    if (n == 0) return;
    constexpr int kVec = kPackElements<Act>;
    if (packs && aligned16(out) && aligned16(a) && aligned16(b))
        elementwise_kernel<kVec><<<element_blocks(n, kVec), kElementThreads, 0, stream>>>(out, a, b, n, op);
    else
        elementwise_kernel<1><<<element_blocks(n, 1), kElementThreads, 0, stream>>>(out, a, b, n, op);
    LAUNCH_CHECK();
}

// ---- residual: out = a + b ------------------------------------------------------------------

struct Add {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// The backward of an add is "pass the gradient to both inputs": the model graph gets that for
// free (see common/cpu/ops.h), so there is no residual backward kernel.
struct Residual {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* a, const Act* b, size_t n) {
        elementwise(ctx.stream, out, a, b, n, Add{});
    }
};

// ---- GELU, tanh approximation ----------------------------------------------------------------

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

struct GeluOf {  // gelu(x)
    __device__ float operator()(float x, float) const {
        return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
    }
};

struct GeluGradient {  // dout · gelu'(x)
    __device__ float operator()(float x, float dout) const {
        const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
        const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        return dout * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
};

struct Gelu {
    static constexpr const char* source = __FILE__;

    template <class Act>
    static void forward(CudaBackend::Context& ctx, Act* out, const Act* inp, size_t n) {
        elementwise<Act>(ctx.stream, out, inp, nullptr, n, GeluOf{});
    }
    template <class Act>
    static void backward(CudaBackend::Context& ctx, Act* dinp, const Act* inp, const Act* dout, size_t n) {
        elementwise(ctx.stream, dinp, inp, dout, n, GeluGradient{});
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
