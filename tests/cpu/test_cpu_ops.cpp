// The CPU reference ops checked on their own, independently of PyTorch: forwards against
// direct formulas, backwards against finite differences of the forwards.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "cpu/ops.h"
#include "testing/compare.h"

using namespace gpt;
using namespace gpt::test;
using Vec = std::vector<float>;

namespace {

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
    return s;
}

// The random direction of the check (the same for every call in a test).
Vec gradient_direction(size_t n) {
    Rng rng(test_seed() + 99);
    return random_normal(rng, n);
}

// Checks a backward against the forward: for a random direction u,
//   d/dh <dout, f(x + h u)> at h = 0   must equal   <grad, u>,
// with the left side from central differences. The error is judged against the L2 norm of the
// terms of <grad, u>, sqrt(sum (grad_i u_i)^2): that is the size <grad, u> has when its random
// terms do not cancel, but unlike the result itself it does not shrink when they happen to. The
// finite difference's O(h^2) error and the forward's float rounding do not shrink either, so a
// bound relative to the result failed correct code on about 4% of random seeds. A wrong
// element moves the result by its whole term; the largest term is a sizeable part of that norm
// (CpuOps.GradientCheckCatchesOneWrongElement).
::testing::AssertionResult gradient_matches(const std::function<Vec(const Vec&)>& f, const Vec& x, const Vec& dout,
                                            const Vec& grad, float h = 1e-2f, double tol = 2e-3) {
    const Vec u = gradient_direction(x.size());
    Vec xp = x, xm = x;
    for (size_t i = 0; i < x.size(); ++i) {
        xp[i] += h * u[i];
        xm[i] -= h * u[i];
    }
    const double numeric = (dot(dout, f(xp)) - dot(dout, f(xm))) / (2.0 * h);
    const double analytic = dot(grad, u);
    double squares = 0;
    for (size_t i = 0; i < x.size(); ++i) squares += double(grad[i]) * u[i] * double(grad[i]) * u[i];
    const double terms = std::sqrt(squares);
    const double bound = tol * (terms + 1e-3);
    if (std::fabs(analytic - numeric) <= bound) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "analytic " << analytic << ", numeric " << numeric << ": off by "
                                         << std::fabs(analytic - numeric) << ", more than " << bound << " (" << tol
                                         << " of the terms' L2 norm " << terms << ")";
}

void expect_gradient(const std::string& what, const std::function<Vec(const Vec&)>& f, const Vec& x,
                     const Vec& dout, const Vec& grad) {
    EXPECT_TRUE(gradient_matches(f, x, dout, grad)) << what << " (test seed " << test_seed() << ")";
}

}  // namespace

TEST(CpuOps, MatmulForwardMatchesDirectSum) {
    Rng rng(test_seed());
    const int N = 37, C = 65, OC = 63;  // not multiples of the blocks
    const Vec x = random_normal(rng, N * C), w = random_normal(rng, OC * C), b = random_normal(rng, OC);
    Vec out(N * OC), expected(N * OC);
    poison(out);
    cpu::matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    for (int n = 0; n < N; ++n)
        for (int o = 0; o < OC; ++o) {
            double s = b[o];
            for (int c = 0; c < C; ++c) s += double(x[n * C + c]) * w[o * C + c];
            expected[n * OC + o] = static_cast<float>(s);
        }
    EXPECT_TRUE(all_close("matmul forward", out, expected, kFp32));
}

TEST(CpuOps, MatmulBackward) {
    Rng rng(test_seed());
    const int N = 13, C = 33, OC = 70;
    const Vec x = random_normal(rng, N * C), w = random_normal(rng, OC * C), b = random_normal(rng, OC);
    const Vec dout = random_normal(rng, N * OC);
    Vec dx(N * C), dw(OC * C, 0.0f), db(OC, 0.0f);
    poison(dx);
    cpu::matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
    auto fwd = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
        Vec o(N * OC);
        cpu::matmul_forward(o.data(), xx.data(), ww.data(), bb.data(), N, C, OC);
        return o;
    };
    expect_gradient("matmul dinp", [&](const Vec& v) { return fwd(v, w, b); }, x, dout, dx);
    expect_gradient("matmul dweight", [&](const Vec& v) { return fwd(x, v, b); }, w, dout, dw);
    expect_gradient("matmul dbias", [&](const Vec& v) { return fwd(x, w, v); }, b, dout, db);
}

// The gradient check itself: it passes the right gradient and fails one with an element dropped.
TEST(CpuOps, GradientCheckCatchesOneWrongElement) {
    Rng rng(test_seed());
    const int N = 37, C = 65, OC = 63;
    const Vec x = random_normal(rng, N * C), w = random_normal(rng, OC * C), dout = random_normal(rng, N * OC);
    auto fwd = [&](const Vec& v) {
        Vec out(N * OC);
        cpu::matmul_forward(out.data(), v.data(), w.data(), nullptr, N, C, OC);
        return out;
    };
    Vec dx(N * C, 0.0f), dw(OC * C, 0.0f);
    cpu::matmul_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC);
    EXPECT_TRUE(gradient_matches(fwd, x, dout, dx)) << "test seed " << test_seed();
    // One element dropped, as a kernel that misses one output would: the one whose term of
    // <grad, u> is largest (one check sees an element only through its term).
    const Vec u = gradient_direction(dx.size());
    size_t k = 0;
    for (size_t i = 1; i < dx.size(); ++i)
        if (std::fabs(dx[i] * u[i]) > std::fabs(dx[k] * u[k])) k = i;
    Vec wrong = dx;
    wrong[k] = 0.0f;
    EXPECT_FALSE(gradient_matches(fwd, x, dout, wrong)) << "test seed " << test_seed();
}

TEST(CpuOps, LayerNormForwardNormalises) {
    Rng rng(test_seed());
    const int N = 9, C = 77;
    const Vec x = random_normal(rng, N * C, 3.0f, 2.0f);
    const Vec w(C, 1.0f), b(C, 0.0f);
    Vec out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    for (int n = 0; n < N; ++n) {
        double m = 0, v = 0;
        for (int c = 0; c < C; ++c) m += out[n * C + c];
        m /= C;
        for (int c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m);
        EXPECT_NEAR(m, 0.0, 1e-5);
        EXPECT_NEAR(v / C, 1.0, 1e-3);  // eps = 1e-5 shrinks it a little
    }
}

TEST(CpuOps, LayerNormBackwardAccumulates) {
    Rng rng(test_seed());
    const int N = 11, C = 45;
    const Vec x = random_normal(rng, N * C, 2.0f, 1.0f), w = random_normal(rng, C, 1.0f, 1.0f),
              b = random_normal(rng, C), dout = random_normal(rng, N * C);
    auto fwd = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
        Vec o(N * C), m(N), r(N);
        cpu::layernorm_forward(o.data(), m.data(), r.data(), xx.data(), ww.data(), bb.data(), N, C);
        return o;
    };
    Vec out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    const Vec dx0 = random_normal(rng, N * C);  // layernorm_backward adds into dinp
    Vec dx = dx0, dw(C, 0.0f), db(C, 0.0f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx0[i];
    expect_gradient("layernorm dinp", [&](const Vec& v) { return fwd(v, w, b); }, x, dout, dx);
    expect_gradient("layernorm dweight", [&](const Vec& v) { return fwd(x, v, b); }, w, dout, dw);
    expect_gradient("layernorm dbias", [&](const Vec& v) { return fwd(x, w, v); }, b, dout, db);
}

TEST(CpuOps, AttentionIsCausal) {
    Rng rng(test_seed());
    const int B = 2, T = 9, C = 24, NH = 3;
    Vec qkv = random_normal(rng, B * T * 3 * C);
    Vec out1(B * T * C), out2(B * T * C), att(B * NH * T * T);
    cpu::attention_forward(out1.data(), att.data(), qkv.data(), B, T, C, NH);
    for (int t = 0; t < T; ++t)  // rows sum to one, zero above the diagonal
        for (int t2 = 0; t2 < T; ++t2)
            if (t2 > t) ASSERT_EQ(att[t * T + t2], 0.0f);
    // changing the last position's keys and values must not change earlier outputs
    for (int c = C; c < 3 * C; ++c) qkv[(T - 1) * 3 * C + c] += 1.0f;
    cpu::attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
    for (int t = 0; t < T - 1; ++t)
        for (int c = 0; c < C; ++c) ASSERT_EQ(out1[t * C + c], out2[t * C + c]) << "t=" << t;
}

TEST(CpuOps, AttentionBackward) {
    Rng rng(test_seed());
    const int B = 2, T = 7, C = 12, NH = 2;
    const Vec qkv = random_normal(rng, B * T * 3 * C), dout = random_normal(rng, B * T * C);
    auto fwd = [&](const Vec& v) {
        Vec o(B * T * C), a(B * NH * T * T);
        cpu::attention_forward(o.data(), a.data(), v.data(), B, T, C, NH);
        return o;
    };
    Vec out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C);
    cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    poison(dqkv);
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    for (float x : dqkv) ASSERT_FALSE(is_poison(x));
    expect_gradient("attention dqkv", fwd, qkv, dout, dqkv);
}

TEST(CpuOps, GeluForwardAndBackward) {
    Rng rng(test_seed());
    const Vec x = random_normal(rng, 301, 2.0f), dout = random_normal(rng, 301);
    Vec y(301), dx(301);
    cpu::gelu_forward(y.data(), x.data(), x.size());
    Vec expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        expected[i] = static_cast<float>(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    EXPECT_TRUE(all_close("gelu forward vs the formula in double", y, expected, kFp32Formula));
    cpu::gelu_backward(dx.data(), x.data(), dout.data(), x.size());
    expect_gradient("gelu", [&](const Vec& v) { Vec o(v.size()); cpu::gelu_forward(o.data(), v.data(), v.size()); return o; },
                    x, dout, dx);
}

TEST(CpuOps, SoftmaxCrossEntropyIgnoresPaddedColumns) {
    Rng rng(test_seed());
    const int N = 5, V = 37, Vp = 48;
    const Vec logits = random_normal(rng, N * V, 3.0f);
    Vec padded(N * Vp);
    for (int n = 0; n < N; ++n)
        for (int v = 0; v < Vp; ++v) padded[n * Vp + v] = v < V ? logits[n * V + v] : 1e4f;  // huge garbage
    const std::vector<int> targets = {0, 36, 5, 17, 36};
    Vec loss1(N), loss2(N), probs1(N * V), probs2(N * Vp);
    cpu::softmax_crossentropy_forward(loss1.data(), probs1.data(), logits.data(), targets.data(), N, V, V);
    cpu::softmax_crossentropy_forward(loss2.data(), probs2.data(), padded.data(), targets.data(), N, V, Vp);
    EXPECT_TRUE(all_close("padded loss", loss2, loss1, kFp32));
    for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int v = 0; v < V; ++v) s += probs2[n * Vp + v];
        EXPECT_NEAR(s, 1.0, 1e-5);
        for (int v = V; v < Vp; ++v) EXPECT_EQ(probs2[n * Vp + v], 0.0f);
        EXPECT_NEAR(loss1[n], -std::log(probs1[n * V + targets[n]]), 1e-4);
    }
    Vec dlogits(N * Vp);
    poison(dlogits);
    cpu::softmax_crossentropy_backward(dlogits.data(), probs2.data(), targets.data(), 0.25f, N, V, Vp);
    for (int n = 0; n < N; ++n)
        for (int v = V; v < Vp; ++v) EXPECT_EQ(dlogits[n * Vp + v], 0.0f);
    // the unpadded gradient against finite differences of the mean-weighted loss
    Vec d1(N * V);
    cpu::softmax_crossentropy_backward(d1.data(), probs1.data(), targets.data(), 0.25f, N, V, V);
    const Vec weights(N, 0.25f);
    expect_gradient("cross-entropy dlogits",
                    [&](const Vec& l) {
                        Vec loss(N), p(N * V);
                        cpu::softmax_crossentropy_forward(loss.data(), p.data(), l.data(), targets.data(), N, V, V);
                        return loss;
                    },
                    logits, weights, d1);
}

TEST(CpuOps, EmbeddingBackwardAddsRepeatedTokens) {
    const int B = 2, T = 3, C = 4, V = 10;
    const std::vector<int> tokens = {7, 2, 7, 7, 0, 9};
    Rng rng(test_seed());
    const Vec dout = random_normal(rng, B * T * C);
    Vec dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
    cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    for (int c = 0; c < C; ++c) {
        EXPECT_FLOAT_EQ(dwte[7 * C + c], dout[0 * C + c] + dout[2 * C + c] + dout[3 * C + c]);
        EXPECT_FLOAT_EQ(dwpe[1 * C + c], dout[1 * C + c] + dout[4 * C + c]);
        EXPECT_EQ(dwte[5 * C + c], 0.0f);
    }
}

TEST(CpuOps, AdamWMatchesTheFormula) {
    Rng rng(test_seed());
    const size_t n = 100;
    Vec p = random_normal(rng, n), g = random_normal(rng, n), m = random_normal(rng, n, 0.1f),
        v = random_uniform(rng, n, 0.0f, 0.01f);
    const Vec p0 = p, m0 = m, v0 = v;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    const int t = 3;
    AdamWSettings settings;
    settings.beta1 = b1;
    settings.beta2 = b2;
    settings.eps = eps;
    settings.weight_decay = wd;
    cpu::adamw_update(p.data(), m.data(), v.data(), g.data(), n, settings, lr, t, scale);
    Vec p_expected(n), m_expected(n), v_expected(n);
    for (size_t i = 0; i < n; ++i) {
        const double gi = double(g[i]) * scale;
        const double mi = b1 * m0[i] + (1 - b1) * gi, vi = b2 * v0[i] + (1 - b2) * gi * gi;
        double pi = p0[i] * (1 - lr * wd);
        pi -= lr * (mi / (1 - std::pow(b1, t))) / (std::sqrt(vi / (1 - std::pow(b2, t))) + eps);
        p_expected[i] = static_cast<float>(pi);
        m_expected[i] = static_cast<float>(mi);
        v_expected[i] = static_cast<float>(vi);
    }
    EXPECT_TRUE(all_close("AdamW weights vs the formula in double", p, p_expected, kFp32Formula));
    EXPECT_TRUE(all_close("AdamW m vs the formula in double", m, m_expected, kFp32Formula));
    EXPECT_TRUE(all_close("AdamW v vs the formula in double", v, v_expected, kFp32Formula));
}

TEST(CpuOps, ClipFactor) {
    EXPECT_EQ(clip_factor(0.5f, 1.0f), 1.0f);    // below the threshold: untouched
    EXPECT_NEAR(clip_factor(4.0f, 1.0f), 1.0f / (4.0f + 1e-6f), 1e-7);
    EXPECT_EQ(clip_factor(1e9f, 0.0f), 1.0f);    // clipping off
    EXPECT_EQ(clip_factor(0.0f, 1.0f), 1.0f);
}
