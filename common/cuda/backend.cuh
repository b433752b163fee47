// What every GPU stage shares and no stage changes: the device, the stream, memory and copies.
// A stage policy derives from CudaBackend and adds its ops (stages/*/stage.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/gemm.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"

namespace gpt {

namespace cuda {
template <class T>
__global__ void convert_kernel(T* out, const float* in, size_t n) {
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = from_float<T>(in[i]);
}
}  // namespace cuda

struct CudaBackend {
    static constexpr bool kIsGpu = true;
    static constexpr int kVocabMultiple = 1;

    template <class U>
    using Buffer = cuda::DeviceBuffer<U>;

    // Per-model state: the stream every op runs on and the matmul library's handle.
    struct Context {
        Context() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
        ~Context() { cudaStreamDestroy(stream); }
        Context(const Context&) = delete;
        Context& operator=(const Context&) = delete;
        cudaStream_t stream = nullptr;
        cuda::GemmContext gemm;
        cuda::DeviceBuffer<double> reduction{16};  // results of device-wide sums (gradient norm)
    };

    static void check_device() { cuda::require_device(); }
    template <class Options>
    static void configure(const Options&) {}
    static std::string device_description() { return cuda::device_description(); }
    static double peak_flops() { return cuda::peak_bf16_flops(cuda::device_name()); }
    static size_t peak_memory_bytes() { return cuda::MemoryStats::peak(); }

    template <class U>
    static void copy_in(Context& ctx, U* dst, const U* host, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(dst, host, n * sizeof(U), cudaMemcpyHostToDevice, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // the host array may go away after we return
    }
    template <class U>
    static void copy_out(Context& ctx, U* host, const U* src, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(host, src, n * sizeof(U), cudaMemcpyDeviceToHost, ctx.stream));
        CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    }
    template <class U>
    static void fill_zero(Context& ctx, U* p, size_t n) {
        CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(U), ctx.stream));
    }
    // The act_t copy of the fp32 master weights (mixed-precision stages only).
    template <class T>
    static void to_act(Context& ctx, T* out, const float* in, size_t n) {
        cuda::convert_kernel<<<cuda::ceil_div(n, 256), 256, 0, ctx.stream>>>(out, in, n);
        LAUNCH_CHECK();
    }
    static float mean_loss(Context& ctx, const float* losses, int n) {
        std::vector<float> host(n);
        copy_out(ctx, host.data(), losses, n);
        double sum = 0.0;
        for (float l : host) sum += l;
        return static_cast<float>(sum / n);
    }
    static void synchronize(Context& ctx) { CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }
};

}  // namespace gpt
