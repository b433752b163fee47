// The CPU reference as a stage policy: the model graph of common/train/gpt.h running the fp32
// ops of common/cpu/ops.h in host memory. It is what `cmake --preset cpu && ./train` trains.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>
#include <sys/resource.h>

#include "cpu/ops.h"
#include "train/precision.h"

namespace gpt {

struct CpuReference {
    static constexpr const char* name = "cpu_reference";
    static constexpr const char* description = "fp32 CPU reference (OpenMP)";
    static constexpr bool kIsGpu = false;
    static constexpr int kVocabMultiple = 1;  // no vocabulary padding
    using act_t = float;
    static constexpr Precision kPrecision = Precision::FP32;

    struct Context {};

    static void check_device() {}
    template <class Options>
    static void configure(const Options& options) {
        if (options.threads > 0) omp_set_num_threads(options.threads);
    }
    static std::string device_description() {
        return "CPU, " + std::to_string(omp_get_max_threads()) + " threads";
    }
    static double peak_flops() { return 0.0; }  // unknown: MFU is not reported on the CPU
    static size_t peak_memory_bytes() {
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        return static_cast<size_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
    }

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
    static void copy_in(Context&, U* dst, const U* host, size_t n) { std::memcpy(dst, host, n * sizeof(U)); }
    template <class U>
    static void copy_out(Context&, U* host, const U* src, size_t n) { std::memcpy(host, src, n * sizeof(U)); }
    template <class U>
    static void fill_zero(Context&, U* p, size_t n) { std::memset(p, 0, n * sizeof(U)); }
    static void to_act(Context&, float*, const float*, size_t) {}  // act_t is float: nothing to convert
    static float mean_loss(Context&, const float* losses, int n) {
        double sum = 0.0;
        for (int i = 0; i < n; ++i) sum += losses[i];
        return static_cast<float>(sum / n);
    }
    static void synchronize(Context&) {}

    struct Embedding {
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
        static void forward(Context&, float* out, const float* inp, size_t n) { cpu::gelu_forward(out, inp, n); }
        static void backward(Context&, float* dinp, const float* inp, const float* dout, size_t n) {
            cpu::gelu_backward(dinp, inp, dout, n);
        }
    };

    struct Residual {
        static void forward(Context&, float* out, const float* a, const float* b, size_t n) {
            cpu::residual_forward(out, a, b, n);
        }
    };

    struct Classifier {
        // saved for backward: the probabilities, N x Vp
        static size_t saved_bytes(size_t N, size_t Vp, size_t) { return N * Vp * sizeof(float); }
        static size_t scratch_bytes(size_t, size_t, size_t) { return 0; }
        static void forward(Context&, float* losses, void* saved, const float* logits, const int* targets, int N,
                            int V, int Vp, void*) {
            cpu::softmax_crossentropy_forward(losses, static_cast<float*>(saved), logits, targets, N, V, Vp);
        }
        static void backward(Context&, float* dlogits, const void* saved, const int* targets, float dloss, int N,
                             int V, int Vp, void*) {
            cpu::softmax_crossentropy_backward(dlogits, static_cast<const float*>(saved), targets, dloss, N, V, Vp);
        }
    };

    struct Optimizer {
        static double sum_squares(Context&, const float* grads, size_t n) { return cpu::sum_squares(grads, n); }
        // act_copy: always null here (the CPU reference has no second copy of the weights).
        static void adamw(Context&, float* params, float* /*act_copy*/, const float* grads, float* m, float* v,
                          size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                          float grad_scale) {
            cpu::adamw_update(params, m, v, grads, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
        }
    };
};

}  // namespace gpt
