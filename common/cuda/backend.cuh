// What every GPU stage shares and no stage changes: the device, the stream, memory, copies,
// the device-side sums the step reports, profiler ranges and step capture. A stage policy
// derives from CudaBackend and adds its ops (stages/*/stage.cuh).
#pragma once
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "cuda/buffer.cuh"
#include "cuda/cached_attention.cuh"
#include "cuda/ceilings.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "cuda/gemm.cuh"
#include "cuda/graph.cuh"
#include "cuda/reduce.cuh"
#include "cuda/types.cuh"
#include "train/op_cost.h"
#include "train/policy.h"

namespace gpt {

struct CudaBackend {
    static constexpr bool kIsGpu = true;

    template <class U>
    using Buffer = cuda::DeviceBuffer<U>;
    template <class U>
    using HostBuffer = cuda::PinnedBuffer<U>;  // staging for asynchronous copies

    // Per-model state: the stream every op runs on, the matmul library with the arithmetic of
    // the stage's precision, and the captured training step (stages with kCaptureStep).
    struct Context {
        template <class Stage>
        explicit Context(StageTag<Stage>) {
            CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            // [stage switch kPrecision]
            matmul_compute = cuda::MatmulMath<Stage::kPrecision>::compute;  // defined by the stage's files
            // [end stage switch kPrecision]
            // [stage switch kTimeMatmuls]
            gemm.time_candidates(Stage::kTimeMatmuls && cuda::matmul_timing_on());
            // [end stage switch kTimeMatmuls]
        }
        ~Context() { cudaStreamDestroy(stream); }
        Context(const Context&) = delete;
        Context& operator=(const Context&) = delete;

        cudaStream_t stream = nullptr;
        cublasComputeType_t matmul_compute{};  // what every matmul of the stage computes with
        // beta of the weight-gradient matmuls: 1 adds to the gradient (the ops' contract,
        // dweight +=), 0 writes it. Set by write_weight_gradients (below), which the model
        // graph calls in a step's first backward; 1 everywhere else.
        float weight_gradient_beta = 1.0f;
        cuda::GemmContext gemm;
        cuda::StepGraph step_graph;
    };

    // Stops with one line unless this process's GPU can run `Stage`: compute capability
    // Stage::kMinComputeCapability or newer. The trainer asks this first (check_stage_device,
    // train/policy.h).
    template <class Stage>
    static void check_device_for() {
        static_assert(Stage::kMinComputeCapability >= kCudaOldestComputeCapability, "CUDA 13 builds for no older GPU");
        cuda::require_device(stage_gpu_need<Stage>());
    }
    // Before the processes meet: is there any GPU at all (which one is this process's is known
    // only once they have met, train/loop.h join_the_run).
    static void require_a_device() {
        if (cuda::device_count() == 0)
            throw Error("no CUDA device found; to train on the CPU instead: cmake --preset cpu && ./train");
    }
    template <class Options>
    static void configure(const Options&) {}
    static std::string device_description() { return cuda::device_description(); }
    // Device memory a Context holds: cuBLASLt's workspace. (Padded copies, allocated on first use
    // for shapes cuBLASLt has no algorithm for, are not known in advance.)
    static constexpr size_t kContextBytes = cuda::GemmContext::kWorkspaceBytes;
    // What the model's buffers can still take (train/memory.h checks before allocating).
    static size_t free_device_memory() {
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        return free_bytes;
    }
    // The MFU denominator. A GPU the peak table does not know gets one warning saying what MFU
    // divides by instead, so that the log shows where the number came from.
    static double peak_flops() {
        const PeakFlops peak = cuda::device_bf16_peak();
        static bool warned = false;
        if (!peak.warning.empty() && !warned) {
            std::printf("%s\n", peak.warning.c_str());
            std::fflush(stdout);
            warned = true;
        }
        return peak.flops;
    }
    // The table entry that gave the peak, or "estimate"; empty when there is no peak.
    static std::string peak_flops_match() { return cuda::device_bf16_peak().source; }
    static size_t peak_memory_bytes() { return cuda::MemoryStats::peak(); }  // cuBLASLt's workspace included
    // For the banner: how a matmul's algorithm is chosen, by the policy's kTimeMatmuls and the
    // environment (common/cuda/gemm.cuh).
    template <class Stage>
    static std::string matmul_algorithm() {
        const bool policy_times = Stage::kTimeMatmuls;  // [describes the policy]
        if (!policy_times) return "cuBLASLt, per shape its heuristic's first choice (kTimeMatmuls off)";
        if (!cuda::matmul_timing_on())
            return "cuBLASLt, per shape its heuristic's first choice (kTimeMatmuls on, but GPT_MATMUL_TIMING=off)";
        return "cuBLASLt, per shape the fastest of its heuristic's first " +
               std::to_string(cuda::GemmContext::kCandidates) +
               ", timed on the shape's first call (kTimeMatmuls on, common/cuda/gemm.cuh)";
    }
    // For the op table: which file defines the stage's matmul arithmetic.
    template <class Stage>
    static std::string matmul_math() {
        return repo_path(cuda::MatmulMath<Stage::kPrecision>::source);  // [describes the policy]
    }

    // Copies that wait until they are done: for setting up and reading back, not inside a step.
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
    // Copies queued on the stream, from and to pinned HostBuffers: the host does not wait, and
    // must not touch the host memory until the stream has passed the copy.
    template <class U>
    static void copy_in_async(Context& ctx, U* dst, const U* pinned, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(dst, pinned, n * sizeof(U), cudaMemcpyHostToDevice, ctx.stream));
    }
    template <class U>
    static void copy_out_async(Context& ctx, U* pinned, const U* src, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(pinned, src, n * sizeof(U), cudaMemcpyDeviceToHost, ctx.stream));
    }
    // Device to device, queued.
    template <class U>
    static void copy(Context& ctx, U* dst, const U* src, size_t n) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(U), cudaMemcpyDeviceToDevice, ctx.stream));
    }
    // The weight gradients of the matmuls queued next are written (true) or added (false): the
    // model graph writes them in a step's first backward (train/model_graph.h, train/gpt.h zero_grad).
    static void write_weight_gradients(Context& ctx, bool write) { ctx.weight_gradient_beta = write ? 0.0f : 1.0f; }
    template <class U>
    static void fill_zero(Context& ctx, U* p, size_t n) {
        CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(U), ctx.stream));
    }
    // *out += the sum of x[0..n), on the device (the step's loss stays there until the step ends).
    static void sum_into(Context& ctx, double* out, const float* x, size_t n) {
        cuda::sum_into(ctx.stream, out, x, n);
        LAUNCH_CHECK();
    }
    static void synchronize(Context& ctx) { CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }

    // Text generation's attention over the key/value cache (GPT::forward_cached): the same in
    // every stage, since generation is not what any stage optimizes.
    template <class T>
    static void cached_attention(Context& ctx, T* out, const T* qkv, int past, int n, int C, int NH) {
        cuda::cached_attention(ctx.stream, out, qkv, past, n, C, NH);
    }

    // A named range on the profiler's timeline (Nsight Systems shows the graph's op names).
    struct Range {
        explicit Range(const char* name) { nvtxRangePushA(name); }
        ~Range() { nvtxRangePop(); }
        Range(const Range&) = delete;
        Range& operator=(const Range&) = delete;
    };

    // The clock of a profiled step (--profile, train/profile.h): an event recorded on the stream
    // per mark, read once the step is done, so that an op's time is the GPU's, not the host's.
    struct Clock {
        using Mark = std::shared_ptr<CUevent_st>;
        static constexpr const char* kName = "CUDA events on the stream";
        static Mark mark(Context& ctx) {
            cudaEvent_t event = nullptr;
            CUDA_CHECK(cudaEventCreate(&event));
            Mark mark(event, [](cudaEvent_t e) { cudaEventDestroy(e); });
            CUDA_CHECK(cudaEventRecord(event, ctx.stream));
            return mark;
        }
        static double ms(const Mark& begin, const Mark& end) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
            return ms;
        }
    };
    // The ceilings a profile reads each op against, measured as the benchmarks measure them
    // (common/cuda/ceilings.cuh): before the model takes its memory, in a second or two. Their
    // buffers are gone afterwards, and do not count in the run's peak memory.
    static Roofs measure_roofs() {
        struct ForgetPeak {
            size_t before = cuda::MemoryStats::peak().load();
            ~ForgetPeak() { cuda::MemoryStats::peak() = std::max(before, cuda::MemoryStats::current().load()); }
        } forget_peak;
        try {
            cudaStream_t stream = nullptr;
            CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
            struct Destroy {
                cudaStream_t s;
                ~Destroy() { cudaStreamDestroy(s); }
            } destroy{stream};
            const cuda::CopyCeiling copy =
                cuda::measure_copy(cuda::kCopyMiB << 20, cuda::kCeilingWarmup, cuda::kCeilingIters, stream);
            const cuda::GemmCeiling gemm =
                cuda::measure_gemm(cuda::kGemmSize, cuda::kCeilingWarmup, cuda::kCeilingIters, stream);
            if (!(copy.gb_per_s > 0 && gemm.tflops > 0)) return {0, 0, "measuring them gave no rate"};
            return {copy.gb_per_s, gemm.tflops, "measured at start-up"};
        } catch (const Error& e) {
            cudaGetLastError();  // an allocation that failed leaves no error behind for the run
            // A kernel that failed does: then the GPU is not fit to train on either.
            if (cudaDeviceSynchronize() != cudaSuccess)
                throw Error(std::string("the GPU failed while measuring its ceilings for --profile: ") + e.what());
            return {0, 0, std::string("measuring them failed: ") + e.what()};
        }
    }

    // [stage switch kCaptureStep]
    // Step capture (stages with kCaptureStep): record what enqueue() queues, then replay it.
    template <class F>
    static void capture_step(Context& ctx, F&& enqueue) {
        ctx.step_graph.capture(ctx.stream, enqueue);
    }
    static bool step_captured(const Context& ctx) { return ctx.step_graph.ready(); }
    static void replay_step(Context& ctx) { ctx.step_graph.replay(ctx.stream); }
    static void forget_step(Context& ctx) { ctx.step_graph.reset(); }
    // [end stage switch kCaptureStep]
};

}  // namespace gpt
