// The GPT-2 model graph: the forward and the backward pass, op by op. It is the same for every
// trainer of the project; a stage changes only which op runs under each name (`O::` below:
// Ops<S>, train/policy.h). Shapes and the gradient conventions every op follows:
// common/cpu/ops.h. The buffers it reads and writes are listed in train/buffers.h; the training
// step that drives it (batches in, the optimizer, the processes) is train/gpt.h.
#pragma once
#include <algorithm>

#include "model/config.h"
#include "model/params.h"
#include "train/buffers.h"
#include "train/policy.h"
#include "train/profile.h"

namespace gpt {

template <class S>
class ModelGraph {
  public:
    using act_t = typename S::act_t;
    using O = Ops<S>;
    using Layer = typename Buffers<S>::Layer;

    // Vp: rows of wte (the vocabulary, padded to S::kVocabMultiple).
    ModelGraph(typename S::Context& ctx, const GPTConfig& config, const ParamLayout& layout, int Vp, Buffers<S>& buf)
        : ctx_(ctx), config_(config), layout_(layout), Vp_(Vp), buf_(buf) {}

    // The logits of the B x T tokens in buf.inputs, with the weights P (act_t, in the layout).
    // past < 0: a training forward, whose attention saves what backward needs.
    // past >= 0: text generation: B = 1, the T tokens at positions past .. past+T-1, their q|k|v
    // rows written after the cached ones, attention over all of them.
    // logits = false: up to ln_f only. A stage whose loss works in chunks of rows
    // (S::kLossChunkRows) computes the logits in loss() and backward() instead, a chunk at a time.
    void forward(const act_t* P, int B, int T, int past = -1, bool logits = true) {
        const int N = B * T, C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
        const auto& at = layout_.offset;
        const size_t first_position = past < 0 ? 0 : size_t(past);

        op("embedding", [&] {
            O::Embedding::forward(ctx_, buf_.encoded.data(), buf_.inputs.data(), P + at[kWte],
                                  P + at[kWpe] + first_position * C, B, T, C);
        });
        Layer& first = buf_.layers[0];
        op("ln_1", [&] {
            O::LayerNorm::forward(ctx_, first.ln1, first.ln1_mean, first.ln1_rstd, buf_.encoded.data(),
                                  param(P, kLn1W, 0), param(P, kLn1B, 0), N, C);
        });
        for (int l = 0; l < L; ++l) {
            Layer& a = buf_.layers[l];
            const act_t* x = l == 0 ? buf_.encoded.data() : buf_.layers[l - 1].residual3;  // the block's input
            op("qkv", [&] {
                O::Matmul::forward(ctx_, a.qkv + first_position * 3 * C, a.ln1, param(P, kQkvW, l),
                                   param(P, kQkvB, l), N, C, 3 * C);
            });
            op("attention", [&] {
                if (past < 0)
                    O::Attention::forward(ctx_, a.atty, a.att_saved, a.qkv, B, T, C, NH, buf_.scratch.data());
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
                Layer& next = buf_.layers[l + 1];
                op("residual+ln_1", [&] {
                    O::ResidualLayerNorm::forward(ctx_, a.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                                  a.residual2, a.fcproj, param(P, kLn1W, l + 1),
                                                  param(P, kLn1B, l + 1), N, C);
                });
            } else {
                op("residual+ln_f", [&] {
                    O::ResidualLayerNorm::forward(ctx_, a.residual3, buf_.lnf.data(), buf_.lnf_mean.data(),
                                                  buf_.lnf_rstd.data(), a.residual2, a.fcproj, P + at[kLnfW],
                                                  P + at[kLnfB], N, C);
                });
            }
        }
        if (logits) lm_head(P, 0, N);
    }

    // [stage switch kLossChunkRows]
    // The rows of logits one pass of the loss handles, of a batch of N positions: all of them, or
    // a chunk of S::kLossChunkRows. Chunked, buf.logits holds one chunk, and the LM head's
    // matmuls and the classifier run once per chunk: the memory of B·T x Vp logits (1.6 GB in
    // bf16 at B·T = 16384 for GPT-2) is never needed at once.
    static int loss_rows(int N) { return S::kLossChunkRows > 0 ? std::min(N, S::kLossChunkRows) : N; }
    static constexpr bool kLossInChunks = S::kLossChunkRows > 0;
    // [end stage switch kLossChunkRows]

    // The loss of each of the N positions of the last forward, against buf.targets, into
    // buf.losses: validation, without gradients.
    void loss(const act_t* P, int N) {
        for (int r0 = 0; r0 < N; r0 += loss_rows(N)) {
            const int n = std::min(loss_rows(N), N - r0);
            // [stage switch kLossChunkRows]
            if (kLossInChunks) lm_head(P, r0, n);  // this chunk's logits
            // [end stage switch kLossChunkRows]
            op("classifier", [&] {
                O::Classifier::forward(ctx_, buf_.losses.data() + r0, classifier_saved<typename O::Classifier>(r0),
                                       buf_.logits.data(), buf_.targets.data() + r0, n, config_.vocab_size, Vp_,
                                       buf_.scratch.data());
            }, n);
        }
    }

    // The losses of the last forward (B x T, a training forward), and the gradient of
    // loss_scale · (their sum), added to the parameter gradients G, or written where the stage's
    // matmuls write them (write_gradients: the step's first backward, train/gpt.h zero_grad). As
    // the gradients of each block become final, gradients_final(i) is called with their bucket i
    // (train/parallel.h): block L-1's first, then down to block 0's, then the embeddings' and ln_f's.
    template <class GradientsFinal>
    void backward(const act_t* P, float* G, int B, int T, float loss_scale, bool write_gradients,
                  GradientsFinal&& gradients_final) {
        const int N = B * T, C = config_.n_embd, NH = config_.n_head, L = config_.n_layer;
        const auto& at = layout_.offset;
        // However this backward ends, the matmuls queued after it add to the gradients again.
        struct AddAfterwards {
            typename S::Context& ctx;
            ~AddAfterwards() { S::write_weight_gradients(ctx, false); }
        } add_afterwards{ctx_};

        // Chunk by chunk (one chunk unless S::kLossChunkRows): the logits, the loss and their
        // gradient in one call, written over the logits, then the LM head's backward. The first
        // chunk writes wte's gradient when the step's first backward does; later chunks add.
        act_t* dlogits = buf_.logits.data();
        for (int r0 = 0; r0 < N; r0 += loss_rows(N)) {
            const int n = std::min(loss_rows(N), N - r0);
            // [stage switch kLossChunkRows]
            if (kLossInChunks) lm_head(P, r0, n);  // this chunk's logits
            // [end stage switch kLossChunkRows]
            op("classifier", [&] {
                O::ClassifierWithGrad::forward_backward(ctx_, buf_.losses.data() + r0, dlogits, buf_.logits.data(),
                                                        buf_.targets.data() + r0, loss_scale, n, config_.vocab_size,
                                                        Vp_, classifier_saved<typename O::ClassifierWithGrad>(r0),
                                                        buf_.scratch.data());
            }, n);
            S::write_weight_gradients(ctx_, write_gradients && r0 == 0);
            op("lm_head backward", [&] {
                O::Matmul::backward(ctx_, buf_.dlnf.data() + size_t(r0) * C, G + at[kWte], nullptr, dlogits,
                                    buf_.lnf.data() + size_t(r0) * C, P + at[kWte], n, C, Vp_);
            }, n);
        }
        S::write_weight_gradients(ctx_, write_gradients);
        // dres carries the gradient of the residual stream down through the blocks.
        act_t* dres = buf_.dresidual.data();
        act_t* dbuf = buf_.dbuf.data();
        S::fill_zero(ctx_, dres, size_t(N) * C);
        op("residual+ln_f backward", [&] {
            O::ResidualLayerNorm::backward(ctx_, dres, G + at[kLnfW], G + at[kLnfB], buf_.dlnf.data(),
                                           buf_.layers[L - 1].residual3, P + at[kLnfW], buf_.lnf_mean.data(),
                                           buf_.lnf_rstd.data(), N, C);
        });
        for (int l = L - 1; l >= 0; --l) {
            Layer& a = buf_.layers[l];
            // MLP branch; dres is the gradient of residual3 and, through the add, of fcproj.
            // fc_proj's backward goes on through the GELU: dfch is the gradient of fch.
            op("fc_proj+gelu backward", [&] {
                O::MatmulBackwardGelu::backward(ctx_, buf_.dfch.data(), grad(G, kFcProjW, l), grad(G, kFcProjB, l),
                                                dres, a.fch_gelu, a.fch, param(P, kFcProjW, l), N, 4 * C, C);
            });
            op("fc backward", [&] {
                O::Matmul::backward(ctx_, dbuf, grad(G, kFcW, l), grad(G, kFcB, l), buf_.dfch.data(), a.ln2,
                                    param(P, kFcW, l), N, C, 4 * C);
            });
            op("residual+ln_2 backward", [&] {
                O::ResidualLayerNorm::backward(ctx_, dres, grad(G, kLn2W, l), grad(G, kLn2B, l), dbuf, a.residual2,
                                               param(P, kLn2W, l), a.ln2_mean, a.ln2_rstd, N, C);
            });
            // attention branch; dres is now the gradient of residual2
            op("attn_proj backward", [&] {
                O::Matmul::backward(ctx_, dbuf, grad(G, kAttProjW, l), grad(G, kAttProjB, l), dres, a.atty,
                                    param(P, kAttProjW, l), N, C, C);
            });
            op("attention backward", [&] {
                O::Attention::backward(ctx_, buf_.dqkv.data(), dbuf, a.qkv, a.atty, a.att_saved, B, T, C, NH,
                                       buf_.scratch.data());
            });
            op("qkv backward", [&] {
                O::Matmul::backward(ctx_, dbuf, grad(G, kQkvW, l), grad(G, kQkvB, l), buf_.dqkv.data(), a.ln1,
                                    param(P, kQkvW, l), N, C, 3 * C);
            });
            // ln_1 of the first block normalises the embeddings; that of a later block is the
            // second half of the previous block's closing residual + LayerNorm.
            if (l == 0) {
                op("ln_1 backward", [&] {
                    O::LayerNorm::backward(ctx_, dres, grad(G, kLn1W, l), grad(G, kLn1B, l), dbuf,
                                           buf_.encoded.data(), param(P, kLn1W, l), a.ln1_mean, a.ln1_rstd, N, C);
                });
            } else {
                op("residual+ln_1 backward", [&] {
                    O::ResidualLayerNorm::backward(ctx_, dres, grad(G, kLn1W, l), grad(G, kLn1B, l), dbuf,
                                                   buf_.layers[l - 1].residual3, param(P, kLn1W, l), a.ln1_mean,
                                                   a.ln1_rstd, N, C);
                });
            }
            gradients_final(L - 1 - l);  // block l's gradients
        }
        op("embedding backward", [&] {
            O::Embedding::backward(ctx_, G + at[kWte], G + at[kWpe], dres, buf_.inputs.data(), B, T, C);
        });
        gradients_final(L);  // wte, wpe and ln_f
    }

    // Runs one op inside a named range, so that a profiler's timeline shows the graph's names,
    // and, in a profiled step (--profile), between two marks of the stage's clock. rows: the
    // positions the op runs on, where it is not all of the pass's (a chunk of the loss).
    template <class F>
    void op(const char* name, F&& enqueue, int rows = 0) {
        typename S::Range range(name);
        if (profile_) profile_->begin(name, rows);
        enqueue();
        if (profile_) profile_->end();
    }
    // The step that is being profiled (train/profile.h), or none.
    void set_profile(StepProfile<S>* profile) { profile_ = profile; }

  private:
    // The output projection is tied to the token embedding: logits = lnf · wteᵀ, of the n rows
    // from r0 on, into buf.logits.
    void lm_head(const act_t* P, int r0, int n) {
        op("lm_head", [&] {
            O::Matmul::forward(ctx_, buf_.logits.data(), buf_.lnf.data() + size_t(r0) * config_.n_embd,
                               P + layout_.offset[kWte], static_cast<const act_t*>(nullptr), n, config_.n_embd, Vp_);
        }, n);
    }

    // Where the classifier keeps what it saves for the rows from r0 on: its bytes for r0 rows in.
    template <class Classifier>
    void* classifier_saved(int r0) {
        return reinterpret_cast<unsigned char*>(buf_.classifier_saved.data()) +
               Classifier::saved_bytes(size_t(r0), size_t(Vp_), sizeof(act_t));
    }

    // Layer l's slice of a per-layer tensor, in the weights P or the gradients G.
    const act_t* param(const act_t* P, int tensor, int l) const {
        return P + layout_.offset[tensor] + layout_.size[tensor] / config_.n_layer * l;
    }
    float* grad(float* G, int tensor, int l) const {
        return G + layout_.offset[tensor] + layout_.size[tensor] / config_.n_layer * l;
    }

    typename S::Context& ctx_;
    const GPTConfig& config_;
    const ParamLayout& layout_;
    const int Vp_;
    Buffers<S>& buf_;
    StepProfile<S>* profile_ = nullptr;
};

}  // namespace gpt
