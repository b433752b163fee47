// The GPT-2 model graph: forward, backward and the optimizer step, written once against a
// stage policy `S`. Every trainer in the project (the CPU reference and each GPU stage) is
// this class with a different policy; the policy supplies the element type of activations,
// the memory and the ops:
//
//   S::act_t                       activations and matmul operands (float, later bf16)
//   S::Context, S::Buffer<U>       per-model state (stream, handles) and owning memory
//   S::copy_in / copy_out / fill_zero / to_act / mean_loss / synchronize
//   S::Embedding, S::LayerNorm, S::Matmul, S::Attention, S::Gelu, S::Residual,
//   S::Classifier, S::Optimizer    forward/backward of each op (see common/cpu/ops.h for the
//                                  shapes and the gradient conventions every op follows)
//
// All memory is allocated once, in the constructor.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "util/error.h"

namespace gpt {

struct AdamWSettings {
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
    float grad_clip = 1.0f;  // 0: no clipping
};

template <class S>
class GPT {
  public:
    using act_t = typename S::act_t;
    template <class U>
    using Buffer = typename S::template Buffer<U>;
    static constexpr bool kSeparateActParams = !std::is_same_v<act_t, float>;

    // B, T: the largest batch the model will see (forward() may use less).
    GPT(const GPTConfig& config, int B, int T)
        : config_(config), B_(B), T_(T), Vp_(config.padded_vocab(S::kVocabMultiple)),
          layout_(config, Vp_), ctx_() {
        validate_config(config);
        if (T > config.max_seq_len)
            throw Error("sequence length " + std::to_string(T) + " is longer than the model's context (" +
                        std::to_string(config.max_seq_len) + "); use --seq " + std::to_string(config.max_seq_len) +
                        " or less");
        if (B <= 0 || T <= 0) throw Error("batch size and sequence length must be positive");
        const size_t n = layout_.total();
        params_ = Buffer<float>(n);
        if constexpr (kSeparateActParams) act_params_ = Buffer<act_t>(n);
        grads_ = Buffer<float>(n);
        m_ = Buffer<float>(n);
        v_ = Buffer<float>(n);
        S::fill_zero(ctx_, params_.data(), n);
        S::fill_zero(ctx_, grads_.data(), n);
        S::fill_zero(ctx_, m_.data(), n);
        S::fill_zero(ctx_, v_.data(), n);
        allocate_activations();
    }

    const GPTConfig& config() const { return config_; }
    int max_batch() const { return B_; }
    int max_seq() const { return T_; }
    int padded_vocab() const { return Vp_; }
    const ParamLayout& layout() const { return layout_; }
    typename S::Context& context() { return ctx_; }

    // --- parameters and optimizer state, in the file layout (unpadded vocabulary) ---------

    void set_parameters(const std::vector<float>& file_params) {
        const std::vector<float> p = pad_vocab(file_params, config_, Vp_);
        S::copy_in(ctx_, params_.data(), p.data(), p.size());
        refresh_act_params();
    }
    std::vector<float> parameters() { return download_unpadded(params_.data()); }
    std::vector<float> gradients() { return download_unpadded(grads_.data()); }
    void set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v) {
        const std::vector<float> pm = pad_vocab(m, config_, Vp_), pv = pad_vocab(v, config_, Vp_);
        S::copy_in(ctx_, m_.data(), pm.data(), pm.size());
        S::copy_in(ctx_, v_.data(), pv.data(), pv.size());
    }
    std::vector<float> optimizer_m() { return download_unpadded(m_.data()); }
    std::vector<float> optimizer_v() { return download_unpadded(v_.data()); }

    // --- forward ---------------------------------------------------------------------------

    // inputs, targets: host arrays of B*T token ids. targets == nullptr: inference only
    // (no loss; backward() not allowed). Returns the mean loss, or 0 without targets.
    float forward(const int* inputs, const int* targets, int B, int T) {
        if (B > B_ || T > T_ || B <= 0 || T <= 0) throw Error("forward: batch larger than allocated");
        B_cur_ = B;
        T_cur_ = T;
        has_targets_ = targets != nullptr;
        const int N = B * T, C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
        const int V = config_.vocab_size;
        S::copy_in(ctx_, inputs_.data(), inputs, N);
        if (targets) S::copy_in(ctx_, targets_.data(), targets, N);
        const act_t* P = act_params();

        S::Embedding::forward(ctx_, encoded_.data(), inputs_.data(), P + layout_.offset[kWte],
                              P + layout_.offset[kWpe], B, T, C);
        for (int l = 0; l < L; ++l) {
            Layer& a = layers_[l];
            const act_t* x = l == 0 ? encoded_.data() : layers_[l - 1].residual3;
            S::LayerNorm::forward(ctx_, a.ln1, a.ln1_mean, a.ln1_rstd, x, param(P, kLn1W, l), param(P, kLn1B, l), N, C);
            S::Matmul::forward(ctx_, a.qkv, a.ln1, param(P, kQkvW, l), param(P, kQkvB, l), N, C, 3 * C);
            S::Attention::forward(ctx_, a.atty, a.att_saved, a.qkv, B, T, C, NH, scratch_.data());
            S::Matmul::forward(ctx_, a.attproj, a.atty, param(P, kAttProjW, l), param(P, kAttProjB, l), N, C, C);
            S::Residual::forward(ctx_, a.residual2, x, a.attproj, size_t(N) * C);
            S::LayerNorm::forward(ctx_, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(P, kLn2W, l),
                                  param(P, kLn2B, l), N, C);
            S::Matmul::forward(ctx_, a.fch, a.ln2, param(P, kFcW, l), param(P, kFcB, l), N, C, 4 * C);
            S::Gelu::forward(ctx_, a.fch_gelu, a.fch, size_t(N) * 4 * C);
            S::Matmul::forward(ctx_, a.fcproj, a.fch_gelu, param(P, kFcProjW, l), param(P, kFcProjB, l), N, 4 * C, C);
            S::Residual::forward(ctx_, a.residual3, a.residual2, a.fcproj, size_t(N) * C);
        }
        S::LayerNorm::forward(ctx_, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), layers_[L - 1].residual3,
                              P + layout_.offset[kLnfW], P + layout_.offset[kLnfB], N, C);
        // The output projection is tied to the token embedding: logits = lnf · wteᵀ.
        S::Matmul::forward(ctx_, logits_.data(), lnf_.data(), P + layout_.offset[kWte], static_cast<const act_t*>(nullptr),
                           N, C, Vp_);
        if (!targets) return 0.0f;
        S::Classifier::forward(ctx_, losses_.data(), classifier_saved_.data(), logits_.data(), targets_.data(), N, V,
                               Vp_, scratch_.data());
        return S::mean_loss(ctx_, losses_.data(), N);
    }

    // Logits of one position after an inference forward(), as floats (the first V).
    std::vector<float> logits_at(int b, int t) {
        std::vector<act_t> row(config_.vocab_size);
        S::copy_out(ctx_, row.data(), logits_.data() + (size_t(b) * T_cur_ + t) * Vp_, row.size());
        std::vector<float> out(row.size());
        for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<float>(row[i]);
        return out;
    }

    // --- backward --------------------------------------------------------------------------

    // Gradients of the mean loss of the last forward() into the parameter gradients (which
    // are zeroed first).
    void backward() {
        if (!has_targets_) throw Error("backward() needs a forward() with targets");
        const int B = B_cur_, T = T_cur_, N = B * T, C = config_.n_embd, NH = config_.n_head;
        const int L = config_.n_layer, V = config_.vocab_size;
        const act_t* P = act_params();
        float* G = grads_.data();
        S::fill_zero(ctx_, G, layout_.total());

        // The loss is a mean over N positions: each position's loss gets weight 1/N.
        act_t* dlogits = logits_.data();  // the logits are not needed any more: reuse their memory
        S::Classifier::backward(ctx_, dlogits, classifier_saved_.data(), targets_.data(), 1.0f / N, N, V, Vp_,
                                scratch_.data());
        S::Matmul::backward(ctx_, dlnf_.data(), G + layout_.offset[kWte], nullptr, dlogits, lnf_.data(),
                            P + layout_.offset[kWte], N, C, Vp_);
        // dresidual carries the gradient of the residual stream down through the layers.
        act_t* dres = dresidual_.data();
        S::fill_zero(ctx_, dres, size_t(N) * C);
        S::LayerNorm::backward(ctx_, dres, G + layout_.offset[kLnfW], G + layout_.offset[kLnfB], dlnf_.data(),
                               layers_[L - 1].residual3, P + layout_.offset[kLnfW], lnf_mean_.data(),
                               lnf_rstd_.data(), N, C);
        for (int l = L - 1; l >= 0; --l) {
            Layer& a = layers_[l];
            const act_t* x = l == 0 ? encoded_.data() : layers_[l - 1].residual3;
            // MLP branch; dres is the gradient of residual3 and, through the add, of fcproj
            S::Matmul::backward(ctx_, dfch_gelu_.data(), grad(G, kFcProjW, l), grad(G, kFcProjB, l), dres,
                                a.fch_gelu, param(P, kFcProjW, l), N, 4 * C, C);
            S::Gelu::backward(ctx_, dfch_.data(), a.fch, dfch_gelu_.data(), size_t(N) * 4 * C);
            S::Matmul::backward(ctx_, dbuf_.data(), grad(G, kFcW, l), grad(G, kFcB, l), dfch_.data(), a.ln2,
                                param(P, kFcW, l), N, C, 4 * C);
            S::LayerNorm::backward(ctx_, dres, grad(G, kLn2W, l), grad(G, kLn2B, l), dbuf_.data(), a.residual2,
                                   param(P, kLn2W, l), a.ln2_mean, a.ln2_rstd, N, C);
            // attention branch; dres is now the gradient of residual2
            S::Matmul::backward(ctx_, dbuf_.data(), grad(G, kAttProjW, l), grad(G, kAttProjB, l), dres, a.atty,
                                param(P, kAttProjW, l), N, C, C);
            S::Attention::backward(ctx_, dqkv_.data(), dbuf_.data(), a.qkv, a.atty, a.att_saved, B, T, C, NH,
                                   scratch_.data());
            S::Matmul::backward(ctx_, dbuf_.data(), grad(G, kQkvW, l), grad(G, kQkvB, l), dqkv_.data(), a.ln1,
                                param(P, kQkvW, l), N, C, 3 * C);
            S::LayerNorm::backward(ctx_, dres, grad(G, kLn1W, l), grad(G, kLn1B, l), dbuf_.data(), x,
                                   param(P, kLn1W, l), a.ln1_mean, a.ln1_rstd, N, C);
        }
        S::Embedding::backward(ctx_, G + layout_.offset[kWte], G + layout_.offset[kWpe], dres, inputs_.data(), B, T,
                               C);
    }

    // --- optimizer -------------------------------------------------------------------------

    // Clips the gradients to settings.grad_clip (by global norm) and applies one AdamW step
    // (t counts steps from 1) to the fp32 master weights. Returns the gradient norm before
    // clipping.
    float update(const AdamWSettings& settings, float lr, int t) {
        const float norm = static_cast<float>(std::sqrt(S::Optimizer::sum_squares(ctx_, grads_.data(), layout_.total())));
        float scale = 1.0f;
        if (settings.grad_clip > 0.0f) scale = std::min(1.0f, settings.grad_clip / (norm + 1e-6f));
        for (int i = 0; i < kNumParamTensors; ++i) {
            const size_t off = layout_.offset[i];
            const float wd = ParamLayout::decays(i) ? settings.weight_decay : 0.0f;
            // With mixed precision the optimizer also rewrites the act_t copy of each weight.
            act_t* copy = nullptr;
            if constexpr (kSeparateActParams) copy = act_params_.data() + off;
            S::Optimizer::adamw(ctx_, params_.data() + off, copy, grads_.data() + off, m_.data() + off,
                                v_.data() + off, layout_.size[i], lr, settings.beta1, settings.beta2, settings.eps, wd,
                                t, scale);
        }
        return norm;
    }

    void synchronize() { S::synchronize(ctx_); }

  private:
    // One transformer block's saved activations (pointers into act_storage_ and stat_storage_).
    struct Layer {
        act_t *ln1, *qkv, *atty, *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
        void* att_saved;
    };

    void allocate_activations() {
        const size_t N = size_t(B_) * T_, C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
        inputs_ = Buffer<int>(N);
        targets_ = Buffer<int>(N);
        encoded_ = Buffer<act_t>(N * C);
        const size_t per_layer_act = round_up(N * C) * 7 + round_up(N * 3 * C) + round_up(N * 4 * C) * 2;
        const size_t att_bytes = S::Attention::saved_bytes(B_, T_, C, NH, sizeof(act_t));
        const size_t att_floats = (att_bytes + sizeof(float) - 1) / sizeof(float);
        act_storage_ = Buffer<act_t>(per_layer_act * L);
        stat_storage_ = Buffer<float>((round_up(N) * 4 + round_up(att_floats)) * L);
        layers_.resize(L);
        act_t* a = act_storage_.data();
        float* s = stat_storage_.data();
        // Every slice starts on a 64-element boundary (at least 128 bytes), as a fresh
        // allocation would: kernels may load 16 bytes at a time.
        auto take = [](auto*& from, size_t n) { auto* p = from; from += round_up(n); return p; };
        for (auto& layer : layers_) {
            layer.ln1 = take(a, N * C);
            layer.qkv = take(a, N * 3 * C);
            layer.atty = take(a, N * C);
            layer.attproj = take(a, N * C);
            layer.residual2 = take(a, N * C);
            layer.ln2 = take(a, N * C);
            layer.fch = take(a, N * 4 * C);
            layer.fch_gelu = take(a, N * 4 * C);
            layer.fcproj = take(a, N * C);
            layer.residual3 = take(a, N * C);
            layer.ln1_mean = take(s, N);
            layer.ln1_rstd = take(s, N);
            layer.ln2_mean = take(s, N);
            layer.ln2_rstd = take(s, N);
            layer.att_saved = take(s, att_floats);
        }
        lnf_ = Buffer<act_t>(N * C);
        lnf_mean_ = Buffer<float>(N);
        lnf_rstd_ = Buffer<float>(N);
        logits_ = Buffer<act_t>(N * Vp_);
        const size_t cls_bytes = S::Classifier::saved_bytes(B_ * T_, Vp_, sizeof(act_t));
        classifier_saved_ = Buffer<float>((cls_bytes + sizeof(float) - 1) / sizeof(float));
        losses_ = Buffer<float>(N);
        // gradients of activations: one buffer of each shape, reused by every layer
        dresidual_ = Buffer<act_t>(N * C);
        dbuf_ = Buffer<act_t>(N * C);
        dlnf_ = Buffer<act_t>(N * C);
        dqkv_ = Buffer<act_t>(N * 3 * C);
        dfch_ = Buffer<act_t>(N * 4 * C);
        dfch_gelu_ = Buffer<act_t>(N * 4 * C);
        const size_t scratch = std::max(S::Attention::scratch_bytes(B_, T_, C, NH, sizeof(act_t)),
                                        S::Classifier::scratch_bytes(B_ * T_, Vp_, sizeof(act_t)));
        scratch_ = Buffer<float>(std::max<size_t>(1, (scratch + sizeof(float) - 1) / sizeof(float)));
    }

    static size_t round_up(size_t n) { return (n + 63) / 64 * 64; }

    const act_t* act_params() {
        if constexpr (kSeparateActParams) return act_params_.data();
        else return params_.data();
    }
    void refresh_act_params() {
        if constexpr (kSeparateActParams) S::to_act(ctx_, act_params_.data(), params_.data(), layout_.total());
    }
    // Layer l's slice of a per-layer tensor.
    const act_t* param(const act_t* P, int tensor, int l) const {
        return P + layout_.offset[tensor] + layout_.size[tensor] / config_.n_layer * l;
    }
    float* grad(float* G, int tensor, int l) const {
        return G + layout_.offset[tensor] + layout_.size[tensor] / config_.n_layer * l;
    }
    std::vector<float> download_unpadded(const float* device_array) {
        std::vector<float> host(layout_.total());
        S::copy_out(ctx_, host.data(), device_array, host.size());
        return unpad_vocab(host, config_, Vp_);
    }

    GPTConfig config_;
    int B_, T_, Vp_;
    ParamLayout layout_;
    typename S::Context ctx_;
    int B_cur_ = 0, T_cur_ = 0;
    bool has_targets_ = false;

    Buffer<float> params_, grads_, m_, v_;
    Buffer<act_t> act_params_;  // act_t copies of the fp32 master weights (mixed precision only)
    Buffer<int> inputs_, targets_;
    Buffer<act_t> encoded_, act_storage_, lnf_, logits_;
    Buffer<float> stat_storage_, lnf_mean_, lnf_rstd_, classifier_saved_, losses_, scratch_;
    std::vector<Layer> layers_;
    Buffer<act_t> dresidual_, dbuf_, dlnf_, dqkv_, dfch_, dfch_gelu_;
};

}  // namespace gpt
