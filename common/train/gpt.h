// The model as a trainer holds it, written once against a stage policy `S`: the model graph
// (train/model_graph.h) with its buffers (train/buffers.h), the optimizer that owns the weights,
// and what drives them: the training step, the staging of batches, validation, text
// generation, parameters in and out, and the memory estimate. Every trainer of the project (the
// CPU reference and each GPU stage) is this class with a different policy. From the policy it
// takes
//
//   S::act_t                      activations and matmul operands (float, later bf16)
//   S::Context, Buffer, HostBuffer   per-model state (stream, handles), device and pinned memory
//   S::kContextBytes              the device memory a Context holds
//   S::copy_in/out(_async), fill_zero, sum_into, synchronize, Range (a profiler range)
//   S::write_weight_gradients (see zero_grad)
//   S::kCaptureStep               the step as one CUDA Graph (capture_step, replay_step, ...)
//   the ops, as Ops<S> resolves them (train/policy.h), for the graph; the Optimizer, which owns
//   the weights; Parallel (rank, world, reductions)
//
// Nothing here waits for the device except sync() and the read-back functions: a training step
// is zero_grad(), then forward() and backward() per micro-batch, then update(), then sync(), and
// train_step() does exactly that (as one CUDA Graph in stages with S::kCaptureStep).
// All memory is allocated once, in the constructor.
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
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/params.h"
#include "train/buffers.h"
#include "train/model_graph.h"
#include "train/optimizer.h"
#include "train/parallel.h"
#include "train/policy.h"
#include "train/profile.h"
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
    static_assert(std::is_same_v<typename Optimizer::act_t, act_t>,
                  "the stage's Optimizer must give the weights in the stage's act_t");
    // [stage switch kVocabMultiple]
    static_assert(S::kVocabMultiple == 1 ||
                      (masks_padding_v<typename O::Classifier> && masks_padding_v<typename O::ClassifierWithGrad>),
                  "a stage that pads the vocabulary needs classifiers that mask the padded columns");
    // [end stage switch kVocabMultiple]

    // [stage switch kVocabMultiple]
    // The rows of wte, its gradient, its optimizer state and of the logits: the vocabulary rounded
    // up to the stage's multiple (stage 05: 50257 -> 50304). The padded rows stay zero, and files
    // keep the vocabulary's rows (pad_vocab and unpad_vocab, common/model/params.h).
    static int padded_vocab(const GPTConfig& config) { return config.padded_vocab(S::kVocabMultiple); }
    // [end stage switch kVocabMultiple]

    // B, T: the largest micro-batch forward() will see. micro_batches: how many forward()s a
    // step holds before sync() (the pinned staging keeps that many batches; more only make the
    // host wait). parallel: the processes training together (null: this one alone).
    GPT(const GPTConfig& config, int B, int T, int micro_batches = 1, Parallel* parallel = nullptr)
        : config_(checked(config, B, T, micro_batches)), B_(B), T_(T), slots_(micro_batches),
          Vp_(padded_vocab(config)), layout_(config, Vp_),
          own_parallel_(parallel ? nullptr : std::make_unique<Parallel>()),
          parallel_(parallel ? parallel : own_parallel_.get()), ctx_(stage_tag<S>),
          // [stage switch Parallel]
          shard_(parallel_->shard(layout_.total())),  // ZeRO-1: this process's part of the optimizer state
          // [end stage switch Parallel]
          buckets_(gradient_buckets(layout_, config_.n_layer)), optimizer_(ctx_, layout_, shard_),
          buf_(typename Buffers<S>::Sizes(config_, B, T, micro_batches, shard_)),
          graph_(ctx_, config_, layout_, Vp_, buf_), added_to_(gradients_added_to(layout_, shard_.padded)) {
        S::fill_zero(ctx_, buf_.grads.data(), shard_.padded);
    }
    // The graph holds references to this object's members: a model stays where it was built.
    GPT(const GPT&) = delete;
    GPT& operator=(const GPT&) = delete;

    // The bytes this model would allocate, computed before allocating anything (the trainer
    // refuses a run that does not fit: train/memory.h): the context's, the optimizer's and those
    // of the buffer table. `buffers` are S::Buffer memory (the device's on a GPU, the host's on the CPU),
    // `host` are S::HostBuffer memory. parallel: as for the constructor.
    struct Memory {
        size_t buffers = 0, host = 0;
    };
    static Memory memory_needed(const GPTConfig& config, int B, int T, int micro_batches = 1,
                                const Parallel* parallel = nullptr) {
        checked(config, B, T, micro_batches);
        const ParamLayout layout(config, padded_vocab(config));
        const Shard shard = parallel ? parallel->shard(layout.total()) : whole(layout.total());
        const auto table = Buffers<S>::bytes(typename Buffers<S>::Sizes(config, B, T, micro_batches, shard));
        return {S::kContextBytes + Optimizer::memory_bytes(layout, shard) + table.device, table.pinned};
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
        // [stage switch Parallel]
        // Each process updated the master weights of its shard only.
        if (parallel_->shards_optimizer()) parallel_->all_gather(ctx_, optimizer_.master(), shard_);
        // [end stage switch Parallel]
        return download_unpadded(optimizer_.master());
    }
    std::vector<float> gradients() { return download_unpadded(buf_.grads.data()); }
    void set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v) {
        const std::vector<float> pm = pad_vocab(m, config_, Vp_), pv = pad_vocab(v, config_, Vp_);
        S::copy_in(ctx_, optimizer_.m(), pm.data() + shard_.begin, shard_.count);
        S::copy_in(ctx_, optimizer_.v(), pv.data() + shard_.begin, shard_.count);
    }
    std::vector<float> optimizer_m() { return unpad_vocab(whole_moment(optimizer_.m()), config_, Vp_); }
    std::vector<float> optimizer_v() { return unpad_vocab(whole_moment(optimizer_.v()), config_, Vp_); }

    // The model's part of a checkpoint after `steps` steps: its config, the fp32 master weights
    // and AdamW's moments (the trainer adds the run's part, RunState: train/loop.h). --resume puts
    // them back into a fresh model with resume_from(). Nothing else a step reads carries over from
    // the step before (each step writes its gradients anew; the act_t weights are rounded from the
    // master weights again), except the algorithm each matmul shape runs, which a new model
    // chooses again (common/cuda/gemm.cuh).
    Checkpoint checkpoint(int steps) {
        Checkpoint c;
        c.config = config_;
        c.step = steps;
        c.params = parameters();
        c.m = optimizer_m();
        c.v = optimizer_v();
        return c;
    }
    void resume_from(const Checkpoint& c) {
        set_parameters(c.params);
        set_optimizer_state(c.m, c.v);
    }

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
        const float* master = optimizer_.master();
        for (const float* array : {master, static_cast<const float*>(buf_.grads.data())}) {
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
        // [stage switch kLossChunkRows]
        if (!targets && size_t(B) * T > logit_rows())
            throw Error("this stage keeps the logits of " + std::to_string(logit_rows()) +
                        " positions at a time (its loss works in chunks); a forward without targets of " +
                        std::to_string(B) + " x " + std::to_string(T) + " positions needs them all");
        // [end stage switch kLossChunkRows]
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
        graph_.loss(optimizer_.act_weights(), N);
        add_losses(N);
    }

    // The loss of each position of the last forward() (with targets), read back: waits for the
    // device. Not part of the next sync()'s result: for an evaluation that scores positions one by
    // one (HellaSwag, train/eval_hellaswag.h).
    std::vector<float> position_losses() {
        require_targets("position_losses()");
        const int N = B_cur_ * T_cur_;
        graph_.loss(optimizer_.act_weights(), N);
        std::vector<float> losses(size_t(N), 0.0f);
        S::copy_out(ctx_, losses.data(), buf_.losses.data(), losses.size());
        return losses;
    }

    // Gradients start from zero at each step. Where the stage's matmuls write their weight
    // gradients in the step's first backward (beta = 0: every GPU stage), those need no zeroing:
    // only the gradients that ops add to are cleared (biases, LayerNorms, wpe: under 1% of GPT-2
    // 124M's parameters), not all of them. So gradients() means nothing again until a backward.
    static constexpr bool kFirstBackwardWrites = weight_gradients_follow_beta_v<typename O::Matmul> &&
                                                 weight_gradients_follow_beta_v<typename O::MatmulBackwardGelu>;
    void zero_grad() {
        set_pass("backward");  // in a profile, it belongs to the gradients the backward makes
        graph_.op("zero_grad", [&] {
            if constexpr (kFirstBackwardWrites) {
                for (const GradientRange& r : added_to_) S::fill_zero(ctx_, buf_.grads.data() + r.begin, r.count);
            } else {
                S::fill_zero(ctx_, buf_.grads.data(), shard_.padded);
            }
        });
        first_backward_ = true;
    }

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
        // [stage switch Parallel]
        if (positions_ > 0)
            graph_.op("loss all-reduce", [&] { parallel_->all_reduce_sum(ctx_, buf_.stats.data() + kLossSum, 1); });
        // [end stage switch Parallel]
        S::copy_out_async(ctx_, buf_.stats_host.data(), buf_.stats.data(), kNumStats);
        wait_for_device();
        StepResult r;
        // [stage switch Parallel]
        if (positions_ > 0)
            r.loss = static_cast<float>(buf_.stats_host.data()[kLossSum] / (double(positions_) * parallel_->world()));
        // [end stage switch Parallel]
        if (updated_) r.grad_norm = static_cast<float>(std::sqrt(buf_.stats_host.data()[kGradSumSquares]));
        positions_ = 0;
        updated_ = false;
        return r;
    }

    // A whole optimizer step over micro-batches of B x T tokens: zero_grad(), forward() and
    // backward(loss_scale) for each, update(), sync(). With S::kCaptureStep the step is
    // recorded as a CUDA Graph on its second call (the first warms up) and replayed after that:
    // the new batches and learning rate reach the graph through the staging buffers.
    // With a profile (--profile, train/profile.h) the step runs op by op, never captured, every
    // op between two marks of the stage's clock: the same work, so the run goes on unchanged.
    StepResult train_step(const std::vector<Batch>& micro_batches, int B, int T, float loss_scale,
                          const AdamWSettings& settings, float lr, int t, StepProfile<S>* profile = nullptr) {
        typename S::Range step_range("step");
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
        if (profile) {
            struct Profiling {  // however the step ends, the next one is not profiled
                GPT& model;
                Profiling(GPT& m, StepProfile<S>* p) : model(m) {
                    model.profile_ = p;
                    model.graph_.set_profile(p);
                }
                ~Profiling() {
                    model.profile_ = nullptr;
                    model.graph_.set_profile(nullptr);
                }
            };
            {
                Profiling profiling(*this, profile);
                profile->begin_step();
                enqueue();
                profile->end_step();
            }
            return sync();
        }
        // [stage switch kCaptureStep]
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
            // [stage switch kLossChunkRows]
            has_logits_ = !Graph::kLossInChunks;
            // [end stage switch kLossChunkRows]
            first_backward_ = false;
        } else {
            enqueue();
        }
        // [end stage switch kCaptureStep]
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
    // Not after a training forward of a stage whose loss computes the logits in chunks.
    std::vector<float> logits_at(int b, int t) {
        if (!has_logits_)
            throw Error("logits_at: the last forward kept no logits (stage " + std::string(S::name) +
                        " computes them a chunk at a time in the loss); run a forward without targets");
        std::vector<act_t> row(config_.vocab_size);
        S::copy_out(ctx_, row.data(), buf_.logits.data() + (size_t(b) * T_cur_ + t) * Vp_, row.size());
        std::vector<float> out(row.size());
        for (size_t i = 0; i < row.size(); ++i) out[i] = static_cast<float>(row[i]);
        return out;
    }

    void synchronize() { wait_for_device(); }

    // What a profiled step of micro-batches of B x T is sized by (train/profile.h).
    ProfileSizes profile_sizes(int B, int T) const {
        ProfileSizes p;
        p.ops = op_sizes(config_, Vp_, B, T, sizeof(act_t));
        p.optimizer_params = double(shard_.count);
        p.act_copy = !std::is_same_v<act_t, float>;
        return p;
    }

  private:
    using Graph = ModelGraph<S>;

    // Which pass the ops that follow belong to, in a profiled step.
    void set_pass(const char* pass) {
        if (profile_) profile_->set_pass(pass);
    }

    // The step's part of a forward: the graph, with the shape backward() will see.
    // A training forward (with targets) of a stage whose loss works in chunks stops at ln_f: the
    // loss computes the logits (train/model_graph.h, loss_rows).
    void enqueue_forward(int B, int T, int past = -1) {
        set_pass("forward");
        B_cur_ = B;
        T_cur_ = T;
        // [stage switch kLossChunkRows]
        has_logits_ = !Graph::kLossInChunks || !has_targets_;  // the loss computes them, a chunk at a time
        // [end stage switch kLossChunkRows]
        graph_.forward(optimizer_.act_weights(), B, T, past, has_logits_);
    }
    // The rows buf_.logits holds (train/buffers.h).
    size_t logit_rows() const { return buf_.logits.size() / size_t(Vp_); }

    // last: the step's last micro-batch, whose backward makes the gradients final and hands
    // them, block by block, to the processes' reduction.
    void enqueue_backward(float loss_scale, bool last) {
        set_pass("backward");
        graph_.backward(optimizer_.act_weights(), buf_.grads.data(), B_cur_, T_cur_, loss_scale, first_backward_,
                        [&](int bucket) {
                            if (last) gradients_ready(bucket);
                        });
        first_backward_ = false;
        add_losses(B_cur_ * T_cur_);
    }

    // The gradients whose tensors a step's first backward does not write whole with a matmul:
    // all but the four weight matrices of each block and wte (the LM head's weight gradient,
    // which the embedding's backward then adds to), and the padding after the last tensor.
    // Neighbours are merged: 5 ranges for GPT-2.
    struct GradientRange {
        size_t begin, count;
    };
    static std::vector<GradientRange> gradients_added_to(const ParamLayout& layout, size_t padded) {
        std::vector<GradientRange> ranges;
        auto add = [&](size_t begin, size_t count) {
            if (count == 0) return;
            if (!ranges.empty() && ranges.back().begin + ranges.back().count == begin) ranges.back().count += count;
            else ranges.push_back({begin, count});
        };
        for (int t = 0; t < kNumParamTensors; ++t) {
            const bool matmul_weight = t == kWte || t == kQkvW || t == kAttProjW || t == kFcW || t == kFcProjW;
            if (!matmul_weight) add(layout.offset[t], layout.size[t]);
        }
        add(layout.total(), padded - layout.total());
        return ranges;
    }

    // [stage switch Parallel]
    void gradients_ready(int bucket) {
        graph_.op("gradient reduction (bucket)",
                  [&] { parallel_->gradients_ready(ctx_, buf_.grads.data(), buckets_[bucket]); });
        buckets_sent_ = bucket + 1 == int(buckets_.size());
    }
    // [end stage switch Parallel]

    void enqueue_update(const AdamWSettings& settings) {
        set_pass("update");
        S::copy_in_async(ctx_, buf_.scalars.data(), buf_.scalars_staging.data(), 1);
        // [stage switch Parallel]
        graph_.op("gradient reduction",
                  [&] { parallel_->reduce_gradients(ctx_, buf_.grads.data(), shard_, buckets_sent_); });
        buckets_sent_ = false;
        // [end stage switch Parallel]
        double* sum_squares = buf_.stats.data() + kGradSumSquares;
        graph_.op("optimizer", [&] {
            optimizer_.step(ctx_, buf_.grads.data(), settings, buf_.scalars.data(), sum_squares, [&] {
                // [stage switch Parallel]
                // ZeRO-1: each process has the sum of squares of its shard; the norm is of all.
                if (parallel_->shards_optimizer())
                    graph_.op("gradient norm all-reduce", [&] { parallel_->all_reduce_sum(ctx_, sum_squares, 1); });
                // [end stage switch Parallel]
            });
        });
        // [stage switch Parallel]
        if (parallel_->shards_optimizer())
            graph_.op("weight all-gather", [&] { parallel_->all_gather(ctx_, optimizer_.act_weights(), shard_); });
        // [end stage switch Parallel]
        updated_ = true;
    }

    // --- staging: host data reaches the device through pinned buffers, without a wait ------

    // A staging slot the device is done with; when all are in use, the host waits first.
    int take_slot() {
        if (slots_used_ == slots_) wait_for_device();
        return slots_used_++;
    }
    void write_batch(int slot, const int* inputs, const int* targets, int N) {
        int* s = buf_.staging.data() + size_t(slot) * 2 * B_ * T_;
        std::memcpy(s, inputs, size_t(N) * sizeof(int));
        if (targets) std::memcpy(s + size_t(B_) * T_, targets, size_t(N) * sizeof(int));
        has_targets_ = targets != nullptr;
    }
    void upload_batch(int slot, int N, bool with_targets) {
        const int* s = buf_.staging.data() + size_t(slot) * 2 * B_ * T_;
        S::copy_in_async(ctx_, buf_.inputs.data(), s, N);
        if (with_targets) S::copy_in_async(ctx_, buf_.targets.data(), s + size_t(B_) * T_, N);
    }
    void write_scalars(float lr, int t) {
        if (scalars_used_) wait_for_device();
        *buf_.scalars_staging.data() = StepScalars{lr, t};
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
        if (positions_ == 0) S::fill_zero(ctx_, buf_.stats.data() + kLossSum, 1);
        S::sum_into(ctx_, buf_.stats.data() + kLossSum, buf_.losses.data(), N);
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

    std::vector<float> download_unpadded(const float* device_array) {
        std::vector<float> host(layout_.total());
        S::copy_out(ctx_, host.data(), device_array, host.size());
        return unpad_vocab(host, config_, Vp_);
    }
    // [stage switch Parallel]
    // A moment of the optimizer (its shard) as the whole padded array, gathered from every
    // process through the gradients' memory when sharded.
    std::vector<float> whole_moment(const float* shard_moment) {
        std::vector<float> host(layout_.total());
        if (!parallel_->shards_optimizer()) {
            S::copy_out(ctx_, host.data(), shard_moment, host.size());
            return host;
        }
        S::copy(ctx_, buf_.grads.data() + shard_.begin, shard_moment, shard_.count);
        parallel_->all_gather(ctx_, buf_.grads.data(), shard_);
        S::copy_out(ctx_, host.data(), buf_.grads.data(), host.size());
        return host;
    }
    // [end stage switch Parallel]

    // [stage switch kCaptureStep]
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
    // [end stage switch kCaptureStep]

    static constexpr int kLossSum = Buffers<S>::kLossSum, kGradSumSquares = Buffers<S>::kGradSumSquares,
                         kNumStats = Buffers<S>::kNumStats;

    GPTConfig config_;
    int B_, T_, slots_, Vp_;
    ParamLayout layout_;
    // The processes first: stage 06's picks this process's GPU, which the context's stream and
    // every buffer then belong to (train/processes.h).
    std::unique_ptr<Parallel> own_parallel_;
    Parallel* parallel_;
    typename S::Context ctx_;
    Shard shard_;                 // the parameters whose optimizer state this process keeps (ZeRO-1)
    std::vector<Bucket> buckets_;  // the gradients in the order backward finishes them
    bool buckets_sent_ = false;    // every bucket went to the reduction in this step's backward
    Optimizer optimizer_;  // owns the weights: fp32 master, moments, and any act_t copy

    // host-side bookkeeping of what is queued on the device
    int B_cur_ = 0, T_cur_ = 0;
    bool has_targets_ = false;
    bool has_logits_ = false;  // the last forward left its logits in buf_.logits
    int slots_used_ = 0;
    bool scalars_used_ = false;
    size_t positions_ = 0;  // positions whose loss was summed since the last sync()
    bool updated_ = false;
    bool first_backward_ = false;  // the next backward writes the matmuls' weight gradients (zero_grad)
    CaptureKey warmed_up_, captured_;

    StepProfile<S>* profile_ = nullptr;  // the step being profiled (train_step), or none
    Buffers<S> buf_;       // every other buffer (train/buffers.h)
    ModelGraph<S> graph_;  // forward and backward over buf_
    std::vector<GradientRange> added_to_;  // what zero_grad() clears (gradients_added_to)
};

}  // namespace gpt
