// The fp32 CPU reference: every op of GPT-2, forward and backward, written as plainly as
// possible. It is the oracle for every GPU kernel test and it trains on its own (the `cpu`
// preset). Shapes use B (batch), T (sequence), C (width), NH (heads), V (vocabulary),
// Vp (padded vocabulary, the row stride of the logits), N = B*T rows.
//
// Gradient conventions, shared with every GPU stage:
//   - parameter gradients (dw, db, dwte, ...) are accumulated: +=
//   - layernorm_backward accumulates into dinp too: the residual stream's gradient flows
//     through the LayerNorm branch and around it, so the backward of a residual add is free
//   - every other activation gradient (dinp of matmul, gelu, attention) is overwritten: =
#pragma once
#include <cstddef>

#include "train/optimizer.h"

namespace gpt::cpu {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);

// out = (inp - mean) * rstd * weight + bias, per row of C; saves mean and rstd (N each).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);

// out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC] (bias may be null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
// dinp = dout · weight; dweight += doutᵀ · inp; dbias += column sums of dout (dbias may be null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);

// Causal self-attention on qkv[B,T,3C] ([q|k|v]); out[B,T,C]; att[B,NH,T,T] saves the softmax
// probabilities (zero above the diagonal).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                        int NH);
// Attention for text generation, one sequence with a key/value cache: qkv[past + n, 3C] holds the
// rows of every position so far; the queries of the last n rows (positions past .. past+n-1)
// attend causally to rows 0 .. their own; out[n, C]. The same arithmetic as attention_forward.
void attention_cached(float* out, const float* qkv, int past, int n, int C, int NH);

// GELU, tanh approximation (as GPT-2).
void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

void residual_forward(float* out, const float* a, const float* b, size_t n);

// Row-wise softmax over the first V of Vp logits, then losses[n] = -log probs[n, targets[n]].
// probs[N,Vp] has zeros in the padded columns.
void softmax_crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N,
                                  int V, int Vp);
// dlogits = (probs - onehot(targets)) * dloss, zero in the padded columns.
void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int N,
                                   int V, int Vp);

// Sum of squares in double, for the global gradient norm.
double sum_squares(const float* x, size_t n);

// One AdamW step as torch.optim.AdamW (docs/formats.md) with the settings' betas, eps and
// weight decay; t counts from 1; the gradient is multiplied by grad_scale (clipping) first.
void adamw_update(float* params, float* m, float* v, const float* grads, size_t n, const AdamWSettings& settings,
                  float lr, int t, float grad_scale);

}  // namespace gpt::cpu
