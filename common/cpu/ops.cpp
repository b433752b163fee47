#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace gpt::cpu {

// Loop bounds are int64 where products of sizes can pass 2^31 (logits of a large batch).
using i64 = long long;

// Below this much work (elements, or multiply-adds), a loop runs on one thread: waking the
// others costs more than it saves. Text generation runs one position at a time, and most of
// its loops are that small.
constexpr i64 kParallelWork = i64(1) << 18;

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) if (i64(B) * T * C >= kParallelWork)
    for (int b = 0; b < B; ++b) {
        for (int t = 0; t < T; ++t) {
            float* o = out + (i64(b) * T + t) * C;
            const float* te = wte + i64(tokens[b * T + t]) * C;
            const float* pe = wpe + i64(t) * C;
            for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
        }
    }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    // Serial: two positions may hold the same token, and their rows of dwte add up.
    for (int b = 0; b < B; ++b) {
        for (int t = 0; t < T; ++t) {
            const float* d = dout + (i64(b) * T + t) * C;
            float* te = dwte + i64(tokens[b * T + t]) * C;
            float* pe = dwpe + i64(t) * C;
            for (int c = 0; c < C; ++c) {
                te[c] += d[c];
                pe[c] += d[c];
            }
        }
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for if (i64(N) * C >= kParallelWork)
    for (int n = 0; n < N; ++n) {
        const float* x = inp + i64(n) * C;
        float m = 0.0f;
        for (int c = 0; c < C; ++c) m += x[c];
        m /= C;
        float var = 0.0f;  // biased variance, as torch.nn.LayerNorm
        for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
        var /= C;
        const float s = 1.0f / std::sqrt(var + eps);
        float* o = out + i64(n) * C;
        for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    // dinp, row by row: with xhat = (x - mean) * rstd and g = dout * weight,
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
#pragma omp parallel for if (i64(N) * C >= kParallelWork)
    for (int n = 0; n < N; ++n) {
        const float* x = inp + i64(n) * C;
        const float* d = dout + i64(n) * C;
        float g_mean = 0.0f, gx_mean = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float xhat = (x[c] - mean[n]) * rstd[n];
            const float g = d[c] * weight[c];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        float* dx = dinp + i64(n) * C;
        for (int c = 0; c < C; ++c) {
            const float xhat = (x[c] - mean[n]) * rstd[n];
            const float g = d[c] * weight[c];
            dx[c] += rstd[n] * (g - g_mean - xhat * gx_mean);
        }
    }
    // dweight and dbias sum over rows: split the columns between threads instead.
#pragma omp parallel for if (i64(N) * C >= kParallelWork)
    for (int c = 0; c < C; ++c) {
        float dw = 0.0f, db = 0.0f;
        for (int n = 0; n < N; ++n) {
            const float d = dout[i64(n) * C + c];
            dw += d * (inp[i64(n) * C + c] - mean[n]) * rstd[n];
            db += d;
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
}

// The three matmuls below do the same arithmetic as the textbook triple loops, reordered for
// the cache: contiguous inner loops the compiler vectorises, four rows at a time so that each
// load of one operand feeds four multiply-adds, and blocks of the other operand small enough
// to stay in cache while they are reused. Each thread writes its own rows, so no two threads
// touch the same output and the result does not depend on the thread count.
namespace {
constexpr int kBlock = 64;
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
    // out[n,o] = dot(inp[n,:], weight[o,:]); `omp simd reduction` lets the compiler vectorise
    // the dot products (it may reorder the additions).
    const int row_blocks = (N + kBlock - 1) / kBlock, col_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static) if (i64(N) * C * OC >= kParallelWork)
    for (int ob = 0; ob < col_blocks; ++ob) {
        for (int nb = 0; nb < row_blocks; ++nb) {
            const int o_end = std::min(OC, (ob + 1) * kBlock), n_end = std::min(N, (nb + 1) * kBlock);
            for (int o = ob * kBlock; o < o_end; ++o) {
                const float* w = weight + i64(o) * C;
                const float b = bias ? bias[o] : 0.0f;
                int n = nb * kBlock;
                for (; n + 4 <= n_end; n += 4) {
                    const float *x0 = inp + i64(n) * C, *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
                    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
                    for (int c = 0; c < C; ++c) {
                        a0 += x0[c] * w[c];
                        a1 += x1[c] * w[c];
                        a2 += x2[c] * w[c];
                        a3 += x3[c] * w[c];
                    }
                    out[i64(n) * OC + o] = a0 + b;
                    out[i64(n + 1) * OC + o] = a1 + b;
                    out[i64(n + 2) * OC + o] = a2 + b;
                    out[i64(n + 3) * OC + o] = a3 + b;
                }
                for (; n < n_end; ++n) {
                    const float* x = inp + i64(n) * C;
                    float a = 0.0f;
#pragma omp simd reduction(+ : a)
                    for (int c = 0; c < C; ++c) a += x[c] * w[c];
                    out[i64(n) * OC + o] = a + b;
                }
            }
        }
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
#pragma omp parallel if (i64(N) * C * OC >= kParallelWork)
    {
        // dinp[n,:] = sum_o dout[n,o] * weight[o,:]: each thread owns rows of dinp and walks
        // weight in blocks of rows, four rows per pass over dinp[n,:].
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n) std::fill(dinp + i64(n) * C, dinp + i64(n + 1) * C, 0.0f);
        for (int o0 = 0; o0 < OC; o0 += kBlock) {
            const int o_end = std::min(OC, o0 + kBlock);
#pragma omp for schedule(static) nowait
            for (int n = 0; n < N; ++n) {
                float* dx = dinp + i64(n) * C;
                const float* d = dout + i64(n) * OC;
                int o = o0;
                for (; o + 4 <= o_end; o += 4) {
                    const float *w0 = weight + i64(o) * C, *w1 = w0 + C, *w2 = w1 + C, *w3 = w2 + C;
                    const float d0 = d[o], d1 = d[o + 1], d2 = d[o + 2], d3 = d[o + 3];
#pragma omp simd
                    for (int c = 0; c < C; ++c) dx[c] += d0 * w0[c] + d1 * w1[c] + d2 * w2[c] + d3 * w3[c];
                }
                for (; o < o_end; ++o) {
                    const float* w = weight + i64(o) * C;
#pragma omp simd
                    for (int c = 0; c < C; ++c) dx[c] += d[o] * w[c];
                }
            }
        }
        // dweight[o,:] += sum_n dout[n,o] * inp[n,:]: each thread owns rows of dweight.
#pragma omp for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += kBlock) {
            const int o_end = std::min(OC, o0 + kBlock);
            int n = 0;
            for (; n + 4 <= N; n += 4) {
                const float *x0 = inp + i64(n) * C, *x1 = x0 + C, *x2 = x1 + C, *x3 = x2 + C;
                for (int o = o0; o < o_end; ++o) {
                    const float d0 = dout[i64(n) * OC + o], d1 = dout[i64(n + 1) * OC + o],
                                d2 = dout[i64(n + 2) * OC + o], d3 = dout[i64(n + 3) * OC + o];
                    float* dw = dweight + i64(o) * C;
#pragma omp simd
                    for (int c = 0; c < C; ++c) dw[c] += d0 * x0[c] + d1 * x1[c] + d2 * x2[c] + d3 * x3[c];
                }
            }
            for (; n < N; ++n) {
                const float* x = inp + i64(n) * C;
                for (int o = o0; o < o_end; ++o) {
                    const float d = dout[i64(n) * OC + o];
                    float* dw = dweight + i64(o) * C;
#pragma omp simd
                    for (int c = 0; c < C; ++c) dw[c] += d * x[c];
                }
            }
            if (dbias) {
                for (int o = o0; o < o_end; ++o) {
                    float db = 0.0f;
                    for (int k = 0; k < N; ++k) db += dout[i64(k) * OC + o];
                    dbias[o] += db;
                }
            }
        }
    }
}

namespace {

// One query of one head against the keys and values of positions 0..t (rows `stride` floats
// apart): the softmax probabilities into a[0..t], their weighted sum of the values into o[0..hs).
void attend(float* o, float* a, const float* q, const float* k, const float* v, int t, i64 stride, int hs,
            float scale) {
    // scores for the keys at or before t (causal), then a stable softmax
    float maxv = -INFINITY;
    for (int t2 = 0; t2 <= t; ++t2) {
        const float* kt = k + t2 * stride;
        float s = 0.0f;
        for (int i = 0; i < hs; ++i) s += q[i] * kt[i];
        a[t2] = s * scale;
        maxv = std::max(maxv, a[t2]);
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) {
        a[t2] = std::exp(a[t2] - maxv);
        sum += a[t2];
    }
    for (int t2 = 0; t2 <= t; ++t2) a[t2] /= sum;
    // weighted sum of the values
    for (int i = 0; i < hs; ++i) o[i] = 0.0f;
    for (int t2 = 0; t2 <= t; ++t2) {
        const float* vt = v + t2 * stride;
        for (int i = 0; i < hs; ++i) o[i] += a[t2] * vt[i];
    }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) if (i64(B) * NH * T * T * hs >= kParallelWork)
    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
            for (int t = 0; t < T; ++t) {
                const float* seq = qkv + i64(b) * T * 3 * C;  // this sequence's rows
                float* a = att + ((i64(b) * NH + h) * T + t) * T;
                attend(out + (i64(b) * T + t) * C + h * hs, a, seq + i64(t) * 3 * C + h * hs, seq + C + h * hs,
                       seq + 2 * C + h * hs, t, 3 * C, hs, scale);
                for (int t2 = t + 1; t2 < T; ++t2) a[t2] = 0.0f;
            }
        }
    }
}

void attention_cached(float* out, const float* qkv, int past, int n, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) if (i64(n) * (past + n) * C >= kParallelWork)
    for (int h = 0; h < NH; ++h) {
        for (int i = 0; i < n; ++i) {
            const int t = past + i;  // the query's position
            std::vector<float> a(t + 1);
            attend(out + i64(i) * C + h * hs, a.data(), qkv + i64(t) * 3 * C + h * hs, qkv + C + h * hs,
                   qkv + 2 * C + h * hs, t, 3 * C, hs, scale);
        }
    }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T, int C,
                        int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    // One (batch, head) per task: the gradients of k and v at position t2 collect
    // contributions from every query t >= t2 of the same head.
#pragma omp parallel for collapse(2) if (i64(B) * NH * T * T * hs >= kParallelWork)
    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
            std::vector<float> datt(T);
            for (int t = 0; t < T; ++t) {
                float* dq = dqkv + (i64(b) * T + t) * 3 * C + h * hs;
                for (int j = 0; j < 3; ++j)
                    std::fill(dq + j * C, dq + j * C + hs, 0.0f);
            }
            for (int t = 0; t < T; ++t) {
                const float* a = att + ((i64(b) * NH + h) * T + t) * T;
                const float* d = dout + (i64(b) * T + t) * C + h * hs;
                const float* q = qkv + (i64(b) * T + t) * 3 * C + h * hs;
                float* dq = dqkv + (i64(b) * T + t) * 3 * C + h * hs;
                // through the weighted sum: datt = dout · v, dv += att * dout
                float dot = 0.0f;  // sum_t2 att * datt, for the softmax backward
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float* v = qkv + (i64(b) * T + t2) * 3 * C + 2 * C + h * hs;
                    float* dv = dqkv + (i64(b) * T + t2) * 3 * C + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; ++i) {
                        s += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                    dot += a[t2] * s;
                }
                // through the softmax: dscore = att * (datt - dot), then the scaled q·k
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float dscore = a[t2] * (datt[t2] - dot) * scale;
                    const float* k = qkv + (i64(b) * T + t2) * 3 * C + C + h * hs;
                    float* dk = dqkv + (i64(b) * T + t2) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; ++i) {
                        dq[i] += dscore * k[i];
                        dk[i] += dscore * q[i];
                    }
                }
            }
        }
    }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
}

void gelu_forward(float* out, const float* inp, size_t n) {
#pragma omp parallel for if (i64(n) >= kParallelWork)
    for (i64 i = 0; i < i64(n); ++i) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
#pragma omp parallel for if (i64(n) >= kParallelWork)
    for (i64 i = 0; i < i64(n); ++i) {
        const float x = inp[i];
        const float u = kGeluScale * (x + 0.044715f * x * x * x);
        const float th = std::tanh(u);
        const float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
    }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for if (i64(n) >= kParallelWork)
    for (i64 i = 0; i < i64(n); ++i) out[i] = a[i] + b[i];
}

void softmax_crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N,
                                  int V, int Vp) {
#pragma omp parallel for if (i64(N) * V >= kParallelWork)
    for (int n = 0; n < N; ++n) {
        const float* l = logits + i64(n) * Vp;
        float* p = probs + i64(n) * Vp;
        float maxv = -INFINITY;
        for (int v = 0; v < V; ++v) maxv = std::max(maxv, l[v]);
        // Summed in double: over 50257 positive terms a running fp32 sum drifted by up to 1.3e-4
        // of itself (seen against an H100's tree sum), above the fp32 tolerance of the GPU tests.
        double sum = 0.0;
        for (int v = 0; v < V; ++v) {
            p[v] = std::exp(l[v] - maxv);
            sum += p[v];
        }
        for (int v = 0; v < V; ++v) p[v] = static_cast<float>(p[v] / sum);
        for (int v = V; v < Vp; ++v) p[v] = 0.0f;  // padded columns are not part of the vocabulary
        // -log softmax computed from the logits, not log(probs): stays finite when the
        // probability underflows.
        losses[n] = static_cast<float>(std::log(sum) + maxv - l[targets[n]]);
    }
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int N,
                                   int V, int Vp) {
#pragma omp parallel for if (i64(N) * V >= kParallelWork)
    for (int n = 0; n < N; ++n) {
        const float* p = probs + i64(n) * Vp;
        float* d = dlogits + i64(n) * Vp;
        for (int v = 0; v < V; ++v) d[v] = p[v] * dloss;
        for (int v = V; v < Vp; ++v) d[v] = 0.0f;
        d[targets[n]] -= dloss;
    }
}

double sum_squares(const float* x, size_t n) {
    // Fixed blocks added in a fixed order: the same bits for any number of threads (an OpenMP
    // reduction adds the threads' parts in the order they finish), so a resumed run is exact.
    constexpr i64 kBlocks = 256;
    double part[kBlocks] = {};
#pragma omp parallel for schedule(static) if (i64(n) >= kParallelWork)
    for (i64 b = 0; b < kBlocks; ++b) {
        const i64 lo = i64(n) * b / kBlocks, hi = i64(n) * (b + 1) / kBlocks;
        double s = 0.0;
        for (i64 i = lo; i < hi; ++i) s += double(x[i]) * x[i];
        part[b] = s;
    }
    double sum = 0.0;
    for (const double p : part) sum += p;
    return sum;
}

void adamw_update(float* params, float* m, float* v, const float* grads, size_t n, const AdamWSettings& settings,
                  float lr, int t, float grad_scale) {
    const float beta1 = settings.beta1, beta2 = settings.beta2, eps = settings.eps;
    const float weight_decay = settings.weight_decay;
    const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
    const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
#pragma omp parallel for if (i64(n) >= kParallelWork)
    for (i64 i = 0; i < i64(n); ++i) {
        const float g = grads[i] * grad_scale;
        params[i] -= lr * weight_decay * params[i];  // decoupled weight decay
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        params[i] -= lr * (m[i] / bias1) / (std::sqrt(v[i] / bias2) + eps);
    }
}

}  // namespace gpt::cpu
