// How much work each op of the model is: the bytes it must move at the least, and the FLOPs of
// its matrix products. The kernel benchmark (tests/bench/kernel_bench.cuh) and a trainer's
// --profile (train/profile.h) divide these by the measured time; tests/bench/op_cost_test.cpp
// checks them on the CPU (against the MFU formula, among others).
//
// Bytes: every tensor in the op's contract (its arguments, as the model graph passes them) read
// once and written once, each in its own element type: activations in act_t (sizeof(act_t)
// bytes), LayerNorm statistics, losses, parameter gradients and optimizer state in fp32, token
// ids as int32. An output that the op adds to (a parameter gradient, LayerNorm's dinp) is read
// and written. What an op keeps for its own backward pass (`saved`) and its `scratch` are its own
// business and not counted, with two exceptions where the contract forces something through
// `saved` (see the classifier and attention below). So the count is the same for every stage:
// a kernel that moves more than this (stage 00 stores the T x T attention matrix and the
// classifier's fp32 probabilities) shows a lower GB/s, which is the point.
//
// FLOPs: 2 per multiply-add of the matrix products (2·M·N·K per product). Only ops made of
// matrix products get FLOPs (flops > 0): they are bound by the GEMM ceiling, every other op by
// the bandwidth ceiling, and the few operations per element of those are not counted.
// Causal attention is counted as FlashAttention counts it (Tri Dao, "FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", 2023, https://arxiv.org/abs/2307.08691,
// section 4.1): the products over the whole T x T score matrix, halved, since the masked half is
// not work; the backward 2.5 times the forward (five products against two). The same count as
// tests/bench/attention.py, so that both print the same TFLOP/s for the same time. It is not the
// MFU formula's (12·L·H·Q·T per token, common/model/config.cpp), which credits the whole square:
// per layer and token this counts 7·C·T, the formula 12·C·T. Kernel-benchmark files written
// before this count (docs/results/2026-11-23_h100, 2026-11-27_h200) counted the whole square:
// attention FLOPs 2 times these forward and 1.6 times backward, and so their TFLOP/s.
//
// Pure host arithmetic in double (counts reach 10^12, far beyond int), no CUDA.
#pragma once
#include <string>

#include "model/config.h"

namespace gpt {

constexpr double kFp32Bytes = 4;   // statistics, losses, parameter gradients, optimizer state
constexpr double kTokenBytes = 4;  // token ids (int32)

// The sizes the model's ops run at.
struct OpSizes {
    double B = 0, T = 0;  // batch and sequence length
    double C = 0, NH = 0;  // width and heads
    double V = 0, Vp = 0;  // vocabulary and its padded size (rows of wte, columns of the logits)
    double act = 0;        // bytes of one activation: sizeof(act_t)

    double N() const { return B * T; }    // positions
    double HS() const { return C / NH; }  // head size
};

// A model's ops at micro-batches of B x T, with the vocabulary padded to Vp rows and act bytes
// an activation.
inline OpSizes op_sizes(const GPTConfig& config, double Vp, double B, double T, double act) {
    OpSizes s;
    s.B = B;
    s.T = T;
    s.C = config.n_embd;
    s.NH = config.n_head;
    s.V = config.vocab_size;
    s.Vp = Vp;
    s.act = act;
    return s;
}

struct Cost {
    double bytes = 0;  // the least the op reads plus writes
    double flops = 0;  // of its matrix products; 0 for an op that is not made of them
    bool matmul_like() const { return flops > 0; }
};

namespace cost {

// out[b,t,:] = wte[token,:] + wpe[t,:]: one row of wte per position (tokens rarely repeat in a
// batch), wpe once (every sequence of the batch reads the same T rows).
inline Cost embedding_forward(const OpSizes& s) {
    return {kTokenBytes * s.N() + s.act * s.N() * s.C + s.act * s.T * s.C + s.act * s.N() * s.C, 0};
}
// dwte rows (one per position) and dwpe are added to: read and written, in fp32.
inline Cost embedding_backward(const OpSizes& s) {
    return {kTokenBytes * s.N() + s.act * s.N() * s.C + 2 * kFp32Bytes * s.N() * s.C + 2 * kFp32Bytes * s.T * s.C,
            0};
}

// inp, weight and bias in; out, mean and rstd out.
inline Cost layernorm_forward(const OpSizes& s) {
    return {s.act * s.N() * s.C + 2 * s.act * s.C + s.act * s.N() * s.C + 2 * kFp32Bytes * s.N(), 0};
}
// dout, inp, weight, mean and rstd in; dinp, dweight and dbias added to.
inline Cost layernorm_backward(const OpSizes& s) {
    return {2 * s.act * s.N() * s.C + s.act * s.C + 2 * kFp32Bytes * s.N() + 2 * s.act * s.N() * s.C +
                2 * 2 * kFp32Bytes * s.C,
            0};
}

// out[N,OC] = inp[N,C] · weight[OC,C]ᵀ + bias[OC]
inline Cost matmul_forward(const OpSizes& s, double C, double OC, bool bias) {
    return {s.act * (s.N() * C + OC * C + (bias ? OC : 0) + s.N() * OC), 2 * s.N() * C * OC};
}
// dinp = dout · weight (written); dweight = doutᵀ · inp (fp32, written: a step's first backward,
// as the benchmark runs it; a later micro-batch's also reads it) and dbias += column sums of dout
// (fp32, read and written). Two products, each as large as the forward one.
inline Cost matmul_backward(const OpSizes& s, double C, double OC, bool bias) {
    return {s.act * (s.N() * OC + OC * C + s.N() * C + s.N() * C) + kFp32Bytes * OC * C +
                2 * kFp32Bytes * (bias ? OC : 0),
            4 * s.N() * C * OC};
}

// Causal self-attention: qkv [N, 3C] in, out [N, C] out. Forward: scores = q · kᵀ and y = att · v,
// 2·T·T·HS FLOPs each per batch and head over the whole square, half of that under the causal
// mask (above). The backward's interface takes qkv, out and what the forward saved: at the least
// one softmax statistic per row and head (the log-sum-exp a fused kernel keeps), counted in both
// passes.
inline Cost attention_forward(const OpSizes& s) {
    return {s.act * (3 * s.N() * s.C + s.N() * s.C) + kFp32Bytes * s.N() * s.NH,
            4 * s.B * s.NH * s.T * s.T * s.HS() / 2};
}
// qkv, out, dout and the statistics in, dqkv out. Five products, as FlashAttention counts them:
// the scores recomputed, then dv, d(att), dq and dk; 2.5 times the forward's two.
inline Cost attention_backward(const OpSizes& s) {
    return {s.act * (3 * s.N() * s.C + s.N() * s.C + s.N() * s.C + 3 * s.N() * s.C) + kFp32Bytes * s.N() * s.NH,
            2.5 * attention_forward(s).flops};
}

// n elements: inp in, out out; backward: inp and dout in, dinp out.
inline Cost gelu_forward(const OpSizes& s, double n) { return {2 * s.act * n, 0}; }
inline Cost gelu_backward(const OpSizes& s, double n) { return {3 * s.act * n, 0}; }

// out = a + b (the model has no residual backward: the gradient passes to both inputs as it is).
inline Cost residual_forward(const OpSizes& s, double n) { return {3 * s.act * n, 0}; }

// Softmax and cross-entropy over the V real columns. The backward needs one number per logit
// beside what the forward saved (the logits themselves, or probabilities the forward wrote): at
// the least one act_t per logit, counted as written by the forward and read by the backward.
inline Cost classifier_forward(const OpSizes& s) {
    return {s.act * s.N() * s.V + kTokenBytes * s.N() + kFp32Bytes * s.N() + s.act * s.N() * s.V, 0};
}
// dlogits is written in full, the padded columns as 0 (the LM head's backward reads them).
inline Cost classifier_backward(const OpSizes& s) {
    return {s.act * s.N() * s.V + kTokenBytes * s.N() + s.act * s.N() * s.Vp, 0};
}
// The fusion slot: logits and targets in, losses and dlogits out, nothing in between.
inline Cost classifier_with_grad(const OpSizes& s) {
    return {s.act * s.N() * s.V + kTokenBytes * s.N() + kFp32Bytes * s.N() + s.act * s.N() * s.Vp, 0};
}

// out = gelu(inp · weightᵀ + bias), and pre = inp · weightᵀ + bias, which the backward needs:
// the matmul's traffic and one more output of the same size. GELU's arithmetic is not counted.
inline Cost matmul_bias_gelu_forward(const OpSizes& s, double C, double OC) {
    Cost c = matmul_forward(s, C, OC, true);
    c.bytes += s.act * s.N() * OC;
    return c;
}
// The backward of a linear layer C -> OC whose input is gelu(pre), on through the GELU: the
// matmul's backward, with pre (N x C) read for GELU's derivative; the gradient of pre is written
// where the matmul's dinp would be.
inline Cost matmul_backward_gelu(const OpSizes& s, double C, double OC) {
    Cost c = matmul_backward(s, C, OC, true);
    c.bytes += s.act * s.N() * C;
    return c;
}

// residual = a + b; out = layernorm(residual): a and b in, residual, out, mean and rstd out.
inline Cost residual_layernorm_forward(const OpSizes& s) {
    return {2 * s.act * s.N() * s.C + 2 * s.act * s.C + 2 * s.act * s.N() * s.C + 2 * kFp32Bytes * s.N(), 0};
}
// The add's backward is free: this is LayerNorm's backward.
inline Cost residual_layernorm_backward(const OpSizes& s) { return layernorm_backward(s); }

// AdamW over P parameters with clipping by the global gradient norm: the norm must be known
// before the first update, so the gradients are read twice (once for the norm, once for the
// update); the fp32 master weights, m and v are read and written; a stage whose act_t is not
// fp32 also writes the act_t copy of the weights.
inline Cost optimizer_step(double P, double act, bool act_copy) {
    return {P * (2 * kFp32Bytes + 3 * 2 * kFp32Bytes + (act_copy ? act : 0)), 0};
}

}  // namespace cost

// The two ceilings an op is read against, measured on the GPU (common/cuda/ceilings.cuh): a large
// device-to-device copy for the ops that only move data, a large bf16 GEMM for the ops made of
// matrix products. Zero where there are none (the CPU).
struct Roofs {
    double gb_per_s = 0, tflops = 0;
    std::string source;  // how they were found, or why there are none
    bool known() const { return gb_per_s > 0 && tflops > 0; }
};

}  // namespace gpt
