#include "testing/term_sizes.h"

#include <cmath>
#include <cstddef>

namespace gpt::test {

std::vector<float> attention_backward_term_sizes(const std::vector<float>& qkv, const std::vector<float>& dout,
                                                 const std::vector<float>& att, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const float scale = 1.0f / std::sqrt(float(HS));
    std::vector<float> sizes(size_t(B) * T * 3 * C, 0.0f);  // sums of squares until the last loop
    std::vector<float> dp_abs(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int i = 0; i < T; ++i) {
                const float* p = &att[((size_t(b) * NH + h) * T + i) * T];
                const float* d_o = &dout[(size_t(b) * T + i) * C + h * HS];
                const float* q = &qkv[(size_t(b) * T + i) * 3 * C + h * HS];
                float d_abs = 0.0f;  // |D|_i
                for (int j = 0; j <= i; ++j) {
                    const float* v = &qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * HS];
                    float sum = 0.0f;
                    for (int e = 0; e < HS; ++e) sum += std::fabs(d_o[e] * v[e]);
                    dp_abs[j] = sum;
                    d_abs += p[j] * sum;
                }
                float* dq = &sizes[(size_t(b) * T + i) * 3 * C + h * HS];
                for (int j = 0; j <= i; ++j) {
                    const float w = scale * p[j] * (dp_abs[j] + d_abs);
                    const float* k = &qkv[(size_t(b) * T + j) * 3 * C + C + h * HS];
                    float* dk = &sizes[(size_t(b) * T + j) * 3 * C + C + h * HS];
                    float* dv = dk + C;
                    for (int e = 0; e < HS; ++e) {
                        dq[e] += (w * k[e]) * (w * k[e]);
                        dk[e] += (w * q[e]) * (w * q[e]);
                        dv[e] += (p[j] * d_o[e]) * (p[j] * d_o[e]);
                    }
                }
            }
    for (float& x : sizes) x = std::sqrt(x);
    return sizes;
}

}  // namespace gpt::test
