// The CPU reference as a stage policy: the model graph of common/train/model_graph.h running the fp32
// ops of common/cpu/ops.h in host memory. It is what `cmake --preset cpu && ./train` trains.
//
//   CpuBackend    host memory, copies, sums: what the GPU stages get from CudaBackend
//   CpuAdamW      the optimizer: fp32 weights and moments, norm, clip and AdamW in one step()
//   CpuReference  the policy: every op calls the plain C++ function of cpu/ops.h
#pragma once
#include <cstdio>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>
#include <sys/resource.h>

#include "cpu/ops.h"
#include "cpu/openmp_wait.h"
#include "train/op_cost.h"
#include "train/optimizer.h"
#include "dist/host_parallel.h"
#include "train/parallel.h"
#include "train/policy.h"
#include "train/precision.h"

namespace gpt {

struct CpuBackend {
    static constexpr bool kIsGpu = false;

    struct Context {
        template <class Stage>
        explicit Context(StageTag<Stage>) {}
    };

    template <class U>
    class Buffer {
      public:
        Buffer() = default;
        explicit Buffer(size_t n) : data_(n) {}
        U* data() { return data_.data(); }
        const U* data() const { return data_.data(); }
        size_t size() const { return data_.size(); }

      private:
        std::vector<U> data_;
    };
    template <class U>
    using HostBuffer = Buffer<U>;  // everything is host memory here

    static void check_device() {}
    static void require_a_device() {}
    template <class Options>
    static void configure(const Options& options) {
        if (options.threads > 0) omp_set_num_threads(options.threads);
        // Allowed (a test may want more threads than cores), but never faster: say so.
        const int cores = omp_get_num_procs();
        if (options.threads > cores)
            std::printf("warning: --threads %d is more than the %d core%s this process may use: the threads take "
                        "turns, and the run is slower than with --threads %d\n",
                        options.threads, cores, cores == 1 ? "" : "s", cores);
    }
    static std::string device_description() {
        const int threads = omp_get_max_threads();
        return "CPU, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
               (threads > 1 && *openmp_wait_policy() ? std::string(", OMP_WAIT_POLICY=") + openmp_wait_policy() : "");
    }
    static size_t free_device_memory() { return 0; }  // no device: the model's buffers are host memory
    static constexpr size_t kContextBytes = 0;        // a Context holds nothing
    static double peak_flops() { return 0.0; }  // unknown: MFU is not reported on the CPU
    static std::string peak_flops_match() { return ""; }  // no entry of the GPU peak table
    static size_t peak_memory_bytes() {
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
    }
    template <class Stage>
    static std::string matmul_math() {
        return "fp32 loops (common/cpu/ops.cpp)";
    }

    template <class U>
    static void copy_in(Context&, U* dst, const U* host, size_t n) { std::memcpy(dst, host, n * sizeof(U)); }
    template <class U>
    static void copy_out(Context&, U* host, const U* src, size_t n) { std::memcpy(host, src, n * sizeof(U)); }
    template <class U>
    static void copy_in_async(Context& ctx, U* dst, const U* host, size_t n) { copy_in(ctx, dst, host, n); }
    template <class U>
    static void copy_out_async(Context& ctx, U* host, const U* src, size_t n) { copy_out(ctx, host, src, n); }
    template <class U>
    static void copy(Context&, U* dst, const U* src, size_t n) { std::memcpy(dst, src, n * sizeof(U)); }
    // The CPU ops always add their gradients: zero_grad() clears every one (train/gpt.h).
    static void write_weight_gradients(Context&, bool) {}
    template <class U>
    static void fill_zero(Context&, U* p, size_t n) { std::memset(p, 0, n * sizeof(U)); }
    static void sum_into(Context&, double* out, const float* x, size_t n) {
        double sum = 0.0;
        for (size_t i = 0; i < n; ++i) sum += x[i];
        *out += sum;
    }
    static void synchronize(Context&) {}
    // Text generation's attention over the key/value cache (GPT::forward_cached).
    static void cached_attention(Context&, float* out, const float* qkv, int past, int n, int C, int NH) {
        cpu::attention_cached(out, qkv, past, n, C, NH);
    }

    struct Range {
        explicit Range(const char*) {}
    };

    // The clock of a profiled step (--profile, train/profile.h): each CPU op has finished when its
    // call returns, so the host's clock times it.
    struct Clock {
        using Mark = std::chrono::steady_clock::time_point;
        static constexpr const char* kName = "the host's clock";
        static Mark mark(Context&) { return std::chrono::steady_clock::now(); }
        static double ms(const Mark& begin, const Mark& end) {
            return std::chrono::duration<double, std::milli>(end - begin).count();
        }
    };
    // No ceilings are measured on the CPU: a profile gives times and rates, not shares of a roof.
    static Roofs measure_roofs() { return {0, 0, "none are measured on the CPU"}; }
};

// AdamW on the host: the same step as every GPU stage's optimizer.
class CpuAdamW : public OptimizerState<CpuBackend> {
  public:
    using act_t = float;
    static constexpr const char* source = __FILE__;

    using OptimizerState::OptimizerState;

    const float* act_weights() const { return master(); }  // fp32 activations read the master weights
    float* act_weights() { return master(); }

    // The norm of the shard's gradients (summed over processes by after_norm() with ZeRO-1), then
    // AdamW on the shard.
    template <class AfterNorm = NothingAfterNorm>
    void step(CpuBackend::Context&, const float* grads, const AdamWSettings& settings, const StepScalars* scalars,
              double* grad_sum_squares, AfterNorm&& after_norm = {}) {
        *grad_sum_squares = cpu::sum_squares(grads + shard().begin, shard().count);
        after_norm();
        const float norm = static_cast<float>(std::sqrt(*grad_sum_squares));
        const float scale = clip_factor(norm, settings.grad_clip);
        for_each_tensor(settings, [&](size_t offset, size_t n, const AdamWSettings& tensor) {
            cpu::adamw_update(master() + offset, m_at(offset), v_at(offset), grads + offset, n, tensor, scalars->lr,
                              scalars->t, scale);
        });
    }
};

struct CpuReference : CpuBackend {
    static constexpr const char* name = "cpu_reference";
    static constexpr const char* description = "fp32 CPU reference (OpenMP)";
    using act_t = float;
    static constexpr Precision kPrecision = Precision::FP32;
    static constexpr int kVocabMultiple = 1;     // no vocabulary padding
    static constexpr bool kCaptureStep = false;  // nothing to capture on the CPU
    static constexpr int kLossChunkRows = 0;     // the loss over all rows' logits at once

    struct Embedding {
        static constexpr const char* source = __FILE__;
        static void forward(Context&, float* out, const int* tokens, const float* wte, const float* wpe, int B,
                            int T, int C) {
            cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
        }
        static void backward(Context&, float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                             int C) {
            cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
        }
    };

    struct LayerNorm {
        static constexpr const char* source = __FILE__;
        static void forward(Context&, float* out, float* mean, float* rstd, const float* inp, const float* w,
                            const float* b, int N, int C) {
            cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
        }
        static void backward(Context&, float* dinp, float* dw, float* db, const float* dout, const float* inp,
                             const float* w, const float* mean, const float* rstd, int N, int C) {
            cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
        }
    };

    struct Matmul {
        static constexpr const char* source = __FILE__;
        static void forward(Context&, float* out, const float* inp, const float* w, const float* bias, int N, int C,
                            int OC) {
            cpu::matmul_forward(out, inp, w, bias, N, C, OC);
        }
        static void backward(Context&, float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                             const float* w, int N, int C, int OC) {
            cpu::matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC);
        }
    };

    struct Attention {
        static constexpr const char* source = __FILE__;
        // saved for backward: the softmax probabilities, B x NH x T x T
        static size_t saved_bytes(size_t B, size_t T, size_t, size_t NH, size_t) { return B * NH * T * T * sizeof(float); }
        static size_t scratch_bytes(size_t, size_t, size_t, size_t, size_t) { return 0; }
        static void forward(Context&, float* out, void* saved, const float* qkv, int B, int T, int C, int NH, void*) {
            cpu::attention_forward(out, static_cast<float*>(saved), qkv, B, T, C, NH);
        }
        static void backward(Context&, float* dqkv, const float* dout, const float* qkv, const float* /*out*/,
                             const void* saved, int B, int T, int C, int NH, void*) {
            cpu::attention_backward(dqkv, dout, qkv, static_cast<const float*>(saved), B, T, C, NH);
        }
    };

    struct Gelu {
        static constexpr const char* source = __FILE__;
        static void forward(Context&, float* out, const float* inp, size_t n) { cpu::gelu_forward(out, inp, n); }
        static void backward(Context&, float* dinp, const float* inp, const float* dout, size_t n) {
            cpu::gelu_backward(dinp, inp, dout, n);
        }
    };

    struct Residual {
        static constexpr const char* source = __FILE__;
        static void forward(Context&, float* out, const float* a, const float* b, size_t n) {
            cpu::residual_forward(out, a, b, n);
        }
    };

    struct Classifier {
        static constexpr const char* source = __FILE__;
        // saved for backward: the probabilities, N x Vp
        static size_t saved_bytes(size_t N, size_t Vp, size_t) { return N * Vp * sizeof(float); }
        static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }
        static void forward(Context&, float* losses, void* saved, const float* logits, const int* targets, int N,
                            int V, int Vp, void*) {
            cpu::softmax_crossentropy_forward(losses, static_cast<float*>(saved), logits, targets, N, V, Vp);
        }
        static void backward(Context&, float* dlogits, const void* saved, const float* /*logits*/,
                             const int* targets, float dloss, int N, int V, int Vp, void*) {
            cpu::softmax_crossentropy_backward(dlogits, static_cast<const float*>(saved), targets, dloss, N, V, Vp);
        }
    };

    // The reference has no fused kernels: the graph composes the ops above (train/compose.h).
    using MatmulBiasGelu = Unfused;
    using MatmulBackwardGelu = Unfused;
    using ResidualLayerNorm = Unfused;
    using ClassifierWithGrad = Unfused;

    using Optimizer = CpuAdamW;
    using Parallel = HostDataParallel;  // one process unless a launcher starts several (common/dist)
};

}  // namespace gpt
