// The GPT-2 model graph, written once against a stage policy `S`: forward, backward, and the
// training step that joins them to the optimizer. Every trainer of the project (the CPU
// reference and each GPU stage) is this class with a different policy. From the policy it takes
//
//   S::act_t                      activations and matmul operands (float, later bf16)
//   S::Context, Buffer, HostBuffer   per-model state (stream, handles), device and pinned memory
//   S::kContextBytes              the device memory a Context holds
//   S::copy_in/out(_async), fill_zero, sum_into, synchronize, Range (a profiler range)
//   the ops, as Ops<S> resolves them (train/policy.h): Embedding, LayerNorm, Matmul, Attention,
//   Gelu, Residual, Classifier; the fusion slots MatmulBiasGelu, MatmulBackwardGelu,
//   ResidualLayerNorm and ClassifierWithGrad; the Optimizer, which owns the weights; Parallel (rank, world, reductions)
//
// Nothing here waits for the device except sync() and the read-back functions: a training step
// is zero_grad(), then forward() and backward() per micro-batch, then update(), then sync(), and
// train_step() does exactly that (as one CUDA Graph in stages with S::kCaptureStep).
// All memory is allocated once, in the constructor. Shapes and the gradient conventions every
// op follows: common/cpu/ops.h.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "data/loader.h"
#include "model/config.h"
#include "model/params.h"
#include "train/optimizer.h"
#include "train/parallel.h"
#include "train/policy.h"
#include "util/error.h"
#include "util/fnv.h"

namespace gpt {

// What a training step reports, read after its one synchronisation.
struct StepResult {
    float loss = std::numeric_limits<float>::quiet_NaN();       // mean loss over the step's positions
    float grad_norm = std::numeric_limits<float>::quiet_NaN();  // before clipping
};

template <class S>
class GPT {
  public:
    using act_t = typename S::act_t;
    using O = Ops<S>;
    using Optimizer = typename O::Optimizer;
    using Parallel = typename O::Parallel;
    template <class U>
    using Buffer = typename S::template Buffer<U>;
    template <class U>
    using HostBuffer = typename S::template HostBuffer<U>;
    static_assert(std::is_same_v<typename Optimizer::act_t, act_t>,
                  "the stage's Optimizer must give the weights in the stage's act_t");
    static_assert(S::kVocabMultiple == 1 ||
                      (masks_padding_v<typename O::Classifier> && masks_padding_v<typename O::ClassifierWithGrad>),
                  "a stage that pads the vocabulary needs classifiers that mask the padded columns");

    // B, T: the largest micro-batch forward() will see. micro_batches: how many forward()s a
    // step holds before sync() (the pinned staging keeps that many batches; more only make the
    // host wait). parallel: the processes training together (null: this one alone).
    GPT(const GPTConfig& config, int B, int T, int micro_batches = 1, Parallel* parallel = nullptr)
        : config_(checked(config, B, T, micro_batches)), B_(B), T_(T), slots_(micro_batches),
          Vp_(config.padded_vocab(S::kVocabMultiple)), layout_(config, Vp_), ctx_(stage_tag<S>),
          own_parallel_(parallel ? nullptr : std::make_unique<Parallel>()),
          parallel_(parallel ? parallel : own_parallel_.get()), shard_(parallel_->shard(layout_.total())),
          buckets_(gradient_buckets(layout_, config_.n_layer)), optimizer_(ctx_, layout_, shard_) {
        const Sizes n(config_, B, T, micro_batches);
        // Padded to whole shards: ZeRO-1 reduces and gathers it in equal pieces per process.
        grads_ = Buffer<float>(shard_.padded);
        S::fill_zero(ctx_, grads_.data(), shard_.padded);
        inputs_ = Buffer<int>(n.tokens);
        targets_ = Buffer<int>(n.tokens);
        staging_ = HostBuffer<int>(n.staging);
        scalars_ = Buffer<StepScalars>(1);
        scalars_staging_ = HostBuffer<StepScalars>(1);
        stats_ = Buffer<double>(kNumStats);
        stats_host_ = HostBuffer<double>(kNumStats);
        allocate_activations(n);
    }

    // The bytes this model would allocate, computed before allocating anything (the trainer
    // refuses a run that does not fit: train/memory.h). `buffers` are S::Buffer memory (the
    // device's on a GPU, the host's on the CPU), `host` are S::HostBuffer memory.
    struct Memory {
        size_t buffers = 0, host = 0;
    };
    static Memory memory_needed(const GPTConfig& config, int B, int T, int micro_batches = 1) {
        const Sizes n(checked(config, B, T, micro_batches), B, T, micro_batches);
        Memory m;
        m.buffers = S::kContextBytes + Optimizer::memory_bytes(ParamLayout(config, n.Vp)) +
                    sizeof(float) * (n.params + n.stats * n.L + 3 * n.rows + n.classifier_saved + n.scratch) +
                    sizeof(act_t) * (n.acts * n.L + 5 * n.act + n.logits + n.act3 + n.act4) +
                    sizeof(int) * 2 * n.tokens + sizeof(StepScalars) + sizeof(double) * kNumStats;
        m.host = sizeof(int) * n.staging + sizeof(StepScalars) + sizeof(double) * kNumStats;
        return m;
    }

    const GPTConfig& config() const { return config_; }
    int max_batch() const { return B_; }
    int max_seq() const { return T_; }
    int padded_vocab() const { return Vp_; }
    const ParamLayout& layout() const { return layout_; }
    typename S::Context& context() { return ctx_; }
    Parallel& parallel() { return *parallel_; }

    // --- parameters and optimizer state, in the file layout (unpadded vocabulary) ---------

    // With a sharded optimizer (ZeRO-1) these gather from every process: every process calls
    // them together. optimizer_m() and optimizer_v() then use the gradients' memory to gather
    // in: gradients() is no longer the last step's after them.
    void set_parameters(const std::vector<float>& file_params) {
        const std::vector<float> p = pad_vocab(file_params, config_, Vp_);
        S::copy_in(ctx_, optimizer_.master(), p.data(), p.size());
        optimizer_.weights_changed(ctx_);
    }
    std::vector<float> parameters() {
        // Each process updated the master weights of its shard only.
        if (parallel_->shards_optimizer()) parallel_->all_gather(ctx_, optimizer_.master(), shard_);
        return download_unpadded(optimizer_.master());
    }
    std::vector<float> gradients() { return download_unpadded(grads_.data()); }
    void set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v) {
        const std::vector<float> pm = pad_vocab(m, config_, Vp_), pv = pad_vocab(v, config_, Vp_);
        S::copy_in(ctx_, optimizer_.m(), pm.data() + shard_.begin, shard_.count);
        S::copy_in(ctx_, optimizer_.v(), pv.data() + shard_.begin, shard_.count);
    }
    std::vector<float> optimizer_m() { return unpad_vocab(whole_moment(optimizer_.m()), config_, Vp_); }
    std::vector<float> optimizer_v() { return unpad_vocab(whole_moment(optimizer_.v()), config_, Vp_); }

    // A fingerprint of the weights the passes read: processes that train together must agree on
    // it (the trainer checks that they do, every so often).
    uint64_t weights_fingerprint() {
        std::vector<act_t> w(layout_.total());
        S::copy_out(ctx_, w.data(), static_cast<const act_t*>(optimizer_.act_weights()), w.size());
        return fingerprint64(w.data(), w.size() * sizeof(act_t));
    }

    // What the padded rows of wte (rows V to Vp - 1, in memory only) hold in the master weights,
    // the act_t weights, the gradients and both moments, one after the other: a trainer that
    // keeps the padding out of the model leaves every one of them exactly 0 (tests).
    std::vector<float> padded_rows() {
        const size_t begin = layout_.offset[kWte] + size_t(config_.vocab_size) * config_.n_embd;
        const size_t count = size_t(Vp_ - config_.vocab_size) * config_.n_embd;
        std::vector<float> all, part(count);
        for (const float* array : {static_cast<const float*>(optimizer_.master()), static_cast<const float*>(grads_.data())}) {
            S::copy_out(ctx_, part.data(), array + begin, count);
            all.insert(all.end(), part.begin(), part.end());
        }
        for (float* moment : {optimizer_.m(), optimizer_.v()}) {
            const std::vector<float> whole = whole_moment(moment);
            all.insert(all.end(), whole.begin() + begin, whole.begin() + begin + count);
        }
        std::vector<act_t> weights(count);
        S::copy_out(ctx_, weights.data(), optimizer_.act_weights() + begin, count);
        for (const act_t w : weights) all.push_back(static_cast<float>(w));
        return all;
    }

    // --- one training step -------------------------------------------------------------------

    // The logits of a batch. inputs, targets: host arrays of B*T token ids; targets == nullptr
    // for inference (no loss, no backward()). The batch goes through a pinned staging slot.
    void forward(const int* inputs, const int* targets, int B, int T) {
        check_shape(B, T);
        const int slot = take_slot();
        write_batch(slot, inputs, targets, B * T);
        upload_batch(slot, B * T, targets != nullptr);
        enqueue_forward(B, T);
    }

    // The losses of the last forward(), without gradients (validation). Their mean is part of
    // the next sync()'s result.
    void evaluate() {
        require_targets("evaluate()");
        const int N = B_cur_ * T_cur_;
        op("classifier", [&] {
            O::Classifier::forward(ctx_, losses_.data(), classifier_saved_.data(), logits_.data(), targets_.data(), N,
                                   config_.vocab_size, Vp_, scratch_.data());
        });
        add_losses(N);
    }

    void zero_grad() { S::fill_zero(ctx_, grads_.data(), shard_.padded); }

    // The losses of the last forward() and the gradient of loss_scale · (their sum), added to
    // the parameter gradients: loss_scale = 1 / (all positions of the step) makes the gradient
    // of the step's mean loss, however many micro-batches and processes share the step.
    void backward(float loss_scale) {
        require_targets("backward()");
        enqueue_backward(loss_scale, false);  // more micro-batches may follow: update() reduces
    }

    // Sums the gradients over the processes, then the optimizer's step: gradient norm, clip
    // factor and AdamW, all on the device. lr and t travel through device memory.
    void update(const AdamWSettings& settings, float lr, int t) {
        write_scalars(lr, t);
        enqueue_update(settings);
    }

    // The one synchronisation of a step: waits for everything queued and reads the mean loss
    // (over all processes) and the gradient norm.
    StepResult sync() {
        if (positions_ > 0) parallel_->all_reduce_sum(ctx_, stats_.data() + kLossSum, 1);
        S::copy_out_async(ctx_, stats_host_.data(), stats_.data(), kNumStats);
        wait_for_device();
        StepResult r;
        if (positions_ > 0)
            r.loss = static_cast<float>(stats_host_.data()[kLossSum] / (double(positions_) * parallel_->world()));
        if (updated_) r.grad_norm = static_cast<float>(std::sqrt(stats_host_.data()[kGradSumSquares]));
        positions_ = 0;
        updated_ = false;
        return r;
    }

    // A whole optimizer step over micro-batches of B x T tokens: zero_grad(), forward() and
    // backward(loss_scale) for each, update(), sync(). With S::kCaptureStep the step is
    // recorded as a CUDA Graph on its second call (the first warms up) and replayed after that:
    // the new batches and learning rate reach the graph through the staging buffers.
    StepResult train_step(const std::vector<Batch>& micro_batches, int B, int T, float loss_scale,
                          const AdamWSettings& settings, float lr, int t) {
        check_shape(B, T);
        const int k = static_cast<int>(micro_batches.size());
        if (k < 1 || k > slots_)
            throw Error("train_step: " + std::to_string(k) + " micro-batches, the model was built for 1 to " +
                        std::to_string(slots_));
        discard_pending();
        for (int i = 0; i < k; ++i) {
            const Batch& b = micro_batches[i];
            if (b.inputs.size() != size_t(B) * T || b.targets.size() != size_t(B) * T)
                throw Error("train_step: micro-batch " + std::to_string(i) + " is not " + std::to_string(B) + " x " +
                            std::to_string(T) + " tokens");
            write_batch(i, b.inputs.data(), b.targets.data(), B * T);
        }
        write_scalars(lr, t);
        auto enqueue = [&] {
            zero_grad();
            for (int i = 0; i < k; ++i) {
                upload_batch(i, B * T, true);
                enqueue_forward(B, T);
                // The last micro-batch's backward hands each block's gradients, once final, to
                // the processes' reduction.
                enqueue_backward(loss_scale, i == k - 1);
            }
            enqueue_update(settings);
        };
        if constexpr (S::kCaptureStep) {
            const CaptureKey key{k, B, T, loss_scale, settings};
            if (S::step_captured(ctx_) && key == captured_) {
                S::replay_step(ctx_);
            } else if (key == warmed_up_) {
                S::capture_step(ctx_, enqueue);
                captured_ = key;
                S::replay_step(ctx_);
            } else {
                S::forget_step(ctx_);
                enqueue();
                warmed_up_ = key;
            }
            // What enqueue() would have left on the host side, had it run now.
            slots_used_ = k;
            positions_ = size_t(k) * B * T;
            updated_ = true;
            B_cur_ = B;
            T_cur_ = T;
            has_targets_ = true;
        } else {
            enqueue();
        }
        return sync();
    }

    // --- text generation -----------------------------------------------------------------------

    // Runs n more tokens of one sequence, at positions past .. past+n-1, with a key/value cache:
    // the q|k|v rows of every position stay in the layers' qkv activations, so the positions
    // before `past` (run by earlier calls of this sequence) are not run again. past = 0 starts a
    // sequence. The logits of the n positions follow (logits_at(0, i)). This uses the training
    // activations' memory: a step (forward()) between the calls of one sequence ends it.
    void forward_cached(const int* tokens, int n, int past) {
        if (past < 0 || n < 1 || past + n > T_)
            throw Error("text generation: positions " + std::to_string(past) + " to " + std::to_string(past + n - 1) +
                        " do not fit the " + std::to_string(T_) + " positions the model was built for");
        const int slot = take_slot();
        write_batch(slot, tokens, nullptr, n);
        upload_batch(slot, n, false);
        enqueue_forward(1, n, past);
    }

    // Logits of one position after forward(), as floats (the first V): waits for the device.
    std::vector<float> logits_at(int b, int t) {
        std::vector<act_t> row(config_.vocab_size);
        S::copy_out(ctx_, row.data(), logits_.data() + (size_t(b) * T_cur_ + t) * Vp_, row.size());
        std::vector<float> out(row.size());
        for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<float>(row[i]);
        return out;
    }

    void synchronize() { wait_for_device(); }

  private:
    // One transformer block's saved activations (pointers into act_storage_ and stat_storage_).
    // ln1 of block l > 0 is written by block l - 1, whose last op is residual + LayerNorm.
    struct Layer {
        act_t *ln1, *qkv, *atty, *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
        void* att_saved;
    };

    // Runs one op inside a named range, so that a profiler's timeline shows the graph's names.
    template <class F>
    void op(const char* name, F&& enqueue) {
        typename S::Range range(name);
        enqueue();
    }

    // past < 0: a training forward of B x T tokens, whose attention saves what backward needs.
    // past >= 0: text generation (forward_cached): B = 1, the T tokens at positions past ..
    // past+T-1, their q|k|v rows written after the cached ones, attention over all of them.
    void enqueue_forward(int B, int T, int past = -1) {
        B_cur_ = B;
        T_cur_ = T;
        const int N = B * T, C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
        const act_t* P = optimizer_.act_weights();
        const auto& at = layout_.offset;
        const size_t first_position = past < 0 ? 0 : size_t(past);

        op("embedding", [&] {
            O::Embedding::forward(ctx_, encoded_.data(), inputs_.data(), P + at[kWte],
                                  P + at[kWpe] + first_position * C, B, T, C);
        });
        Layer& first = layers_[0];
        op("ln_1", [&] {
            O::LayerNorm::forward(ctx_, first.ln1, first.ln1_mean, first.ln1_rstd, encoded_.data(),
                                  param(P, kLn1W, 0), param(P, kLn1B, 0), N, C);
        });
        for (int l = 0; l < L; ++l) {
            Layer& a = layers_[l];
            const act_t* x = l == 0 ? encoded_.data() : layers_[l - 1].residual3;  // the block's input
            op("qkv", [&] {
                O::Matmul::forward(ctx_, a.qkv + first_position * 3 * C, a.ln1, param(P, kQkvW, l),
                                   param(P, kQkvB, l), N, C, 3 * C);
            });
            op("attention", [&] {
                if (past < 0)
                    O::Attention::forward(ctx_, a.atty, a.att_saved, a.qkv, B, T, C, NH, scratch_.data());
                else
                    S::cached_attention(ctx_, a.atty, static_cast<const act_t*>(a.qkv), past, T, C, NH);
            });
            op("attn_proj", [&] {
                O::Matmul::forward(ctx_, a.attproj, a.atty, param(P, kAttProjW, l), param(P, kAttProjB, l), N, C, C);
            });
            op("residual+ln_2", [&] {
                O::ResidualLayerNorm::forward(ctx_, a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.attproj,
                                              param(P, kLn2W, l), param(P, kLn2B, l), N, C);
            });
            op("fc+gelu", [&] {
                O::MatmulBiasGelu::forward(ctx_, a.fch_gelu, a.fch, a.ln2, param(P, kFcW, l), param(P, kFcB, l), N, C,
                                           4 * C);
            });
            op("fc_proj", [&] {
                O::Matmul::forward(ctx_, a.fcproj, a.fch_gelu, param(P, kFcProjW, l), param(P, kFcProjB, l), N,
                                   4 * C, C);
            });
            // The add that closes the block, with the LayerNorm that follows it: the next
            // block's ln_1, or the final ln_f after the last block.
            if (l + 1 < L) {
                Layer& next = layers_[l + 1];
                op("residual+ln_1", [&] {
                    O::ResidualLayerNorm::forward(ctx_, a.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                                  a.residual2, a.fcproj, param(P, kLn1W, l + 1),
                                                  param(P, kLn1B, l + 1), N, C);
                });
            } else {
                op("residual+ln_f", [&] {
                    O::ResidualLayerNorm::forward(ctx_, a.residual3, lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(),
                                                  a.residual2, a.fcproj, P + at[kLnfW], P + at[kLnfB], N, C);
                });
            }
        }
        // The output projection is tied to the token embedding: logits = lnf · wteᵀ.
        op("lm_head", [&] {
            O::Matmul::forward(ctx_, logits_.data(), lnf_.data(), P + at[kWte], static_cast<const act_t*>(nullptr), N,
                               C, Vp_);
        });
    }

    // last: the step's last micro-batch, whose backward makes the gradients final.
    void enqueue_backward(float loss_scale, bool last) {
        const int B = B_cur_, T = T_cur_, N = B * T, C = config_.n_embd, NH = config_.n_head;
        const int L = config_.n_layer;
        const act_t* P = optimizer_.act_weights();
        float* G = grads_.data();
        const auto& at = layout_.offset;

        // The loss and the gradient of the logits in one call, written over the logits.
        act_t* dlogits = logits_.data();
        op("classifier", [&] {
            O::ClassifierWithGrad::forward_backward(ctx_, losses_.data(), dlogits, logits_.data(), targets_.data(),
                                                    loss_scale, N, config_.vocab_size, Vp_,
                                                    classifier_saved_.data(), scratch_.data());
        });
        add_losses(N);
        op("lm_head backward", [&] {
            O::Matmul::backward(ctx_, dlnf_.data(), G + at[kWte], nullptr, dlogits, lnf_.data(), P + at[kWte], N, C,
                                Vp_);
        });
        // dres carries the gradient of the residual stream down through the blocks.
        act_t* dres = dresidual_.data();
        S::fill_zero(ctx_, dres, size_t(N) * C);
        op("residual+ln_f backward", [&] {
            O::ResidualLayerNorm::backward(ctx_, dres, G + at[kLnfW], G + at[kLnfB], dlnf_.data(),
                                           layers_[L - 1].residual3, P + at[kLnfW], lnf_mean_.data(),
                                           lnf_rstd_.data(), N, C);
        });
        for (int l = L - 1; l >= 0; --l) {
            Layer& a = layers_[l];
            // MLP branch; dres is the gradient of residual3 and, through the add, of fcproj.
            // fc_proj's backward goes on through the GELU: dfch is the gradient of fch.
            op("fc_proj+gelu backward", [&] {
                O::MatmulBackwardGelu::backward(ctx_, dfch_.data(), grad(G, kFcProjW, l), grad(G, kFcProjB, l), dres,
                                                a.fch_gelu, a.fch, param(P, kFcProjW, l), N, 4 * C, C);
            });
            op("fc backward", [&] {
                O::Matmul::backward(ctx_, dbuf_.data(), grad(G, kFcW, l), grad(G, kFcB, l), dfch_.data(), a.ln2,
                                    param(P, kFcW, l), N, C, 4 * C);
            });
            op("residual+ln_2 backward", [&] {
                O::ResidualLayerNorm::backward(ctx_, dres, grad(G, kLn2W, l), grad(G, kLn2B, l), dbuf_.data(),
                                               a.residual2, param(P, kLn2W, l), a.ln2_mean, a.ln2_rstd, N, C);
            });
            // attention branch; dres is now the gradient of residual2
            op("attn_proj backward", [&] {
                O::Matmul::backward(ctx_, dbuf_.data(), grad(G, kAttProjW, l), grad(G, kAttProjB, l), dres, a.atty,
                                    param(P, kAttProjW, l), N, C, C);
            });
            op("attention backward", [&] {
                O::Attention::backward(ctx_, dqkv_.data(), dbuf_.data(), a.qkv, a.atty, a.att_saved, B, T, C, NH,
                                       scratch_.data());
            });
            op("qkv backward", [&] {
                O::Matmul::backward(ctx_, dbuf_.data(), grad(G, kQkvW, l), grad(G, kQkvB, l), dqkv_.data(), a.ln1,
                                    param(P, kQkvW, l), N, C, 3 * C);
            });
            // ln_1 of the first block normalises the embeddings; that of a later block is the
            // second half of the previous block's closing residual + LayerNorm.
            if (l == 0) {
                op("ln_1 backward", [&] {
                    O::LayerNorm::backward(ctx_, dres, grad(G, kLn1W, l), grad(G, kLn1B, l), dbuf_.data(),
                                           encoded_.data(), param(P, kLn1W, l), a.ln1_mean, a.ln1_rstd, N, C);
                });
            } else {
                op("residual+ln_1 backward", [&] {
                    O::ResidualLayerNorm::backward(ctx_, dres, grad(G, kLn1W, l), grad(G, kLn1B, l), dbuf_.data(),
                                                   layers_[l - 1].residual3, param(P, kLn1W, l), a.ln1_mean,
                                                   a.ln1_rstd, N, C);
                });
            }
            if (last) gradients_ready(L - 1 - l);  // block l's gradients are final
        }
        op("embedding backward", [&] {
            O::Embedding::backward(ctx_, G + at[kWte], G + at[kWpe], dres, inputs_.data(), B, T, C);
        });
        if (last) gradients_ready(L);  // wte, wpe and ln_f
    }

    void gradients_ready(int bucket) {
        op("gradient reduction (bucket)", [&] { parallel_->gradients_ready(ctx_, grads_.data(), buckets_[bucket]); });
        buckets_sent_ = bucket + 1 == int(buckets_.size());
    }

    void enqueue_update(const AdamWSettings& settings) {
        S::copy_in_async(ctx_, scalars_.data(), scalars_staging_.data(), 1);
        op("gradient reduction", [&] { parallel_->reduce_gradients(ctx_, grads_.data(), shard_, buckets_sent_); });
        buckets_sent_ = false;
        double* sum_squares = stats_.data() + kGradSumSquares;
        op("optimizer", [&] {
            optimizer_.step(ctx_, grads_.data(), settings, scalars_.data(), sum_squares, [&] {
                // ZeRO-1: each process has the sum of squares of its shard; the norm is of all.
                if (parallel_->shards_optimizer()) parallel_->all_reduce_sum(ctx_, sum_squares, 1);
            });
        });
        if (parallel_->shards_optimizer())
            op("weight all-gather", [&] { parallel_->all_gather(ctx_, optimizer_.act_weights(), shard_); });
        updated_ = true;
    }

    // --- staging: host data reaches the device through pinned buffers, without a wait ------

    // A staging slot the device is done with; when all are in use, the host waits first.
    int take_slot() {
        if (slots_used_ == slots_) wait_for_device();
        return slots_used_++;
    }
    void write_batch(int slot, const int* inputs, const int* targets, int N) {
        int* s = staging_.data() + size_t(slot) * 2 * B_ * T_;
        std::memcpy(s, inputs, size_t(N) * sizeof(int));
        if (targets) std::memcpy(s + size_t(B_) * T_, targets, size_t(N) * sizeof(int));
        has_targets_ = targets != nullptr;
    }
    void upload_batch(int slot, int N, bool with_targets) {
        const int* s = staging_.data() + size_t(slot) * 2 * B_ * T_;
        S::copy_in_async(ctx_, inputs_.data(), s, N);
        if (with_targets) S::copy_in_async(ctx_, targets_.data(), s + size_t(B_) * T_, N);
    }
    void write_scalars(float lr, int t) {
        if (scalars_used_) wait_for_device();
        *scalars_staging_.data() = StepScalars{lr, t};
        scalars_used_ = true;
    }
    void wait_for_device() {
        S::synchronize(ctx_);
        slots_used_ = 0;
        scalars_used_ = false;
    }
    // A step starts from nothing queued: results of work nobody read back are dropped.
    void discard_pending() {
        if (slots_used_ > 0 || scalars_used_ || positions_ > 0 || updated_) wait_for_device();
        positions_ = 0;
        updated_ = false;
    }

    // The sum of the losses since the last sync(), on the device.
    void add_losses(int N) {
        if (positions_ == 0) S::fill_zero(ctx_, stats_.data() + kLossSum, 1);
        S::sum_into(ctx_, stats_.data() + kLossSum, losses_.data(), N);
        positions_ += N;
    }

    void check_shape(int B, int T) const {
        if (B > B_ || T > T_ || B <= 0 || T <= 0)
            throw Error("a batch of " + std::to_string(B) + " x " + std::to_string(T) + " tokens does not fit the " +
                        std::to_string(B_) + " x " + std::to_string(T_) + " the model was built for");
    }
    void require_targets(const char* what) const {
        if (!has_targets_) throw Error(std::string(what) + " needs a forward() with targets");
    }
    static const GPTConfig& checked(const GPTConfig& config, int B, int T, int micro_batches) {
        validate_config(config);
        if (T > config.max_seq_len)
            throw Error("sequence length " + std::to_string(T) + " is longer than the model's context (" +
                        std::to_string(config.max_seq_len) + "); use --seq " + std::to_string(config.max_seq_len) +
                        " or less");
        if (B <= 0 || T <= 0) throw Error("batch size and sequence length must be positive");
        // The graph counts a batch's positions in an int.
        if (size_t(B) * T > size_t(std::numeric_limits<int>::max()))
            throw Error("a batch of " + std::to_string(B) + " x " + std::to_string(T) + " tokens is more than " +
                        std::to_string(std::numeric_limits<int>::max()) + " positions");
        if (micro_batches < 1) throw Error("a step needs at least one micro-batch");
        using HeadSizes = AttentionHeadSizes<typename O::Attention>;
        if (!HeadSizes::supports(config.head_size()))
            throw Error("the attention of stage " + std::string(S::name) + " handles head sizes " + HeadSizes::list() +
                        "; this model's is C/H = " + std::to_string(config.n_embd) + "/" +
                        std::to_string(config.n_head) + " = " + std::to_string(config.head_size()));
        return config;
    }

    // The element count of every buffer, from the shapes alone: the constructor allocates
    // exactly these, and memory_needed() adds them up before anything is allocated.
    struct Sizes {
        size_t N, C, L, Vp;
        size_t params, tokens, staging;  // gradients; inputs and targets; the pinned staging slots
        size_t act, act3, act4;          // act_t of one N x C, N x 3C and N x 4C activation
        size_t rows;                     // floats of one value per position (mean, rstd, loss)
        size_t att_saved;                // floats attention saves for backward, per layer
        size_t acts, stats;              // act_t and floats each layer keeps (act_storage_, stat_storage_)
        size_t logits, classifier_saved, scratch;
        Sizes(const GPTConfig& config, int B, int T, int micro_batches)
            : N(size_t(B) * T), C(config.n_embd), L(config.n_layer), Vp(config.padded_vocab(S::kVocabMultiple)) {
            const size_t NH = config.n_head, a = sizeof(act_t);
            params = ParamLayout(config, int(Vp)).total();
            tokens = N;
            staging = 2 * N * micro_batches;
            act = N * C, act3 = N * 3 * C, act4 = N * 4 * C, rows = N;
            att_saved = floats(O::Attention::saved_bytes(B, T, C, NH, a));
            acts = round_up(act) * 7 + round_up(act3) + round_up(act4) * 2;
            stats = round_up(rows) * 4 + round_up(att_saved);
            logits = N * Vp;
            // The fused classifier slot (ClassifierWithGrad) and the plain one (evaluate) share
            // what they save for backward, and every op shares one scratch area (both at least
            // one float, so that they have an address).
            classifier_saved = std::max<size_t>(
                1, floats(std::max(O::ClassifierWithGrad::saved_bytes(N, Vp, a), O::Classifier::saved_bytes(N, Vp, a))));
            scratch = std::max<size_t>(1, floats(std::max({O::Attention::scratch_bytes(B, T, C, NH, a),
                                                           O::Classifier::scratch_bytes(N, Vp, a),
                                                           O::ClassifierWithGrad::scratch_bytes(N, Vp, a)})));
        }
        static size_t floats(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }
    };

    void allocate_activations(const Sizes& n) {
        const size_t L = n.L;
        encoded_ = Buffer<act_t>(n.act);
        act_storage_ = Buffer<act_t>(n.acts * L);
        stat_storage_ = Buffer<float>(n.stats * L);
        layers_.resize(L);
        act_t* a = act_storage_.data();
        float* s = stat_storage_.data();
        // Every slice starts on a 64-element boundary (at least 128 bytes), as a fresh
        // allocation would: kernels may load 16 bytes at a time.
        auto take = [](auto*& from, size_t count) { auto* p = from; from += round_up(count); return p; };
        for (auto& layer : layers_) {
            layer.ln1 = take(a, n.act);
            layer.qkv = take(a, n.act3);
            layer.atty = take(a, n.act);
            layer.attproj = take(a, n.act);
            layer.residual2 = take(a, n.act);
            layer.ln2 = take(a, n.act);
            layer.fch = take(a, n.act4);
            layer.fch_gelu = take(a, n.act4);
            layer.fcproj = take(a, n.act);
            layer.residual3 = take(a, n.act);
            layer.ln1_mean = take(s, n.rows);
            layer.ln1_rstd = take(s, n.rows);
            layer.ln2_mean = take(s, n.rows);
            layer.ln2_rstd = take(s, n.rows);
            layer.att_saved = take(s, n.att_saved);
        }
        lnf_ = Buffer<act_t>(n.act);
        lnf_mean_ = Buffer<float>(n.rows);
        lnf_rstd_ = Buffer<float>(n.rows);
        logits_ = Buffer<act_t>(n.logits);
        classifier_saved_ = Buffer<float>(n.classifier_saved);  // what the classifier keeps for backward
        losses_ = Buffer<float>(n.rows);
        // gradients of activations: one buffer of each shape, reused by every layer
        dresidual_ = Buffer<act_t>(n.act);
        dbuf_ = Buffer<act_t>(n.act);
        dlnf_ = Buffer<act_t>(n.act);
        dqkv_ = Buffer<act_t>(n.act3);
        dfch_ = Buffer<act_t>(n.act4);  // the gradient of fch (MatmulBackwardGelu carries it through the GELU)
        scratch_ = Buffer<float>(n.scratch);
    }

    static size_t round_up(size_t n) { return (n + 63) / 64 * 64; }

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
    // A moment of the optimizer (its shard) as the whole padded array, gathered from every
    // process through the gradients' memory when sharded.
    std::vector<float> whole_moment(const float* shard_moment) {
        std::vector<float> host(layout_.total());
        if (!parallel_->shards_optimizer()) {
            S::copy_out(ctx_, host.data(), shard_moment, host.size());
            return host;
        }
        S::copy(ctx_, grads_.data() + shard_.begin, shard_moment, shard_.count);
        parallel_->all_gather(ctx_, grads_.data(), shard_);
        S::copy_out(ctx_, host.data(), grads_.data(), host.size());
        return host;
    }

    // What a captured step was recorded with: a step of another shape or settings is recaptured.
    struct CaptureKey {
        int micro_batches = 0, B = 0, T = 0;
        float loss_scale = 0;
        AdamWSettings settings{};
        bool operator==(const CaptureKey& o) const {
            return micro_batches == o.micro_batches && B == o.B && T == o.T && loss_scale == o.loss_scale &&
                   settings.beta1 == o.settings.beta1 && settings.beta2 == o.settings.beta2 &&
                   settings.eps == o.settings.eps && settings.weight_decay == o.settings.weight_decay &&
                   settings.grad_clip == o.settings.grad_clip;
        }
    };

    // The device-side results of a step: the sum of the losses, the gradients' sum of squares.
    static constexpr int kLossSum = 0, kGradSumSquares = 1, kNumStats = 2;

    GPTConfig config_;
    int B_, T_, slots_, Vp_;
    ParamLayout layout_;
    typename S::Context ctx_;
    std::unique_ptr<Parallel> own_parallel_;
    Parallel* parallel_;
    Shard shard_;                 // the parameters whose optimizer state this process keeps (ZeRO-1)
    std::vector<Bucket> buckets_;  // the gradients in the order backward finishes them
    bool buckets_sent_ = false;    // every bucket went to the reduction in this step's backward
    Optimizer optimizer_;  // owns the weights: fp32 master, moments, and any act_t copy

    // host-side bookkeeping of what is queued on the device
    int B_cur_ = 0, T_cur_ = 0;
    bool has_targets_ = false;
    int slots_used_ = 0;
    bool scalars_used_ = false;
    size_t positions_ = 0;  // positions whose loss was summed since the last sync()
    bool updated_ = false;
    CaptureKey warmed_up_, captured_;

    Buffer<float> grads_;
    Buffer<int> inputs_, targets_;
    HostBuffer<int> staging_;  // slots of inputs and targets, pinned
    Buffer<StepScalars> scalars_;
    HostBuffer<StepScalars> scalars_staging_;
    Buffer<double> stats_;
    HostBuffer<double> stats_host_;
    Buffer<act_t> encoded_, act_storage_, lnf_, logits_;
    Buffer<float> stat_storage_, lnf_mean_, lnf_rstd_, classifier_saved_, losses_, scratch_;
    std::vector<Layer> layers_;
    Buffer<act_t> dresidual_, dbuf_, dlnf_, dqkv_, dfch_;
};

}  // namespace gpt
