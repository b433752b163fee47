// The size of the terms an output was summed from, element by element, for the comparisons of
// testing/compare.h: where the terms are larger than the sum, their rounding is too
// (testing/tolerance.h, "Sums whose terms are larger than they are").
#pragma once
#include <vector>

namespace gpt::test {

// For the attention backward: dqkv's term sizes, laid out as dqkv ([B*T, 3C]), from the inputs
// qkv and dout and the probabilities P ([B, NH, T, T]) of the CPU forward. The softmax's backward,
// dS_ij = P_ij (dP_ij - D_i) with dP_ij = dO_i . v_j and D_i = sum_j P_ij dP_ij, subtracts nearly
// equal numbers where a query attends to few keys (at T = 1 exactly, so that dq = dk = 0): what is
// left is the rounding of dP's and D's operands, as large as their terms. So each term counts at
// the size of what cancels in it, |dP|_ij = sum_e |dO_ie v_je| and |D|_i = sum_j P_ij |dP|_ij, and
// the terms' roundings, independent, add as the root of a sum of squares:
//     dq_id: scale * sqrt(sum_{j <= i} (P_ij (|dP|_ij + |D|_i) k_jd)^2)
//     dk_jd: scale * sqrt(sum_{i >= j} (P_ij (|dP|_ij + |D|_i) q_id)^2)
//     dv_jd: sqrt(sum_{i >= j} (P_ij dO_id)^2)
// with scale = 1 / sqrt(head size).
std::vector<float> attention_backward_term_sizes(const std::vector<float>& qkv, const std::vector<float>& dout,
                                                 const std::vector<float>& att, int B, int T, int C, int NH);

}  // namespace gpt::test
