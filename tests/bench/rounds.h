// The order in which the kernel benchmark times its entries in each of --rounds rounds
// (kernel_bench.cuh, in_rounds). Plain C++, so that the CPU tests check it.
//
// On an H200 the same kernel timed 0.14 or 0.19 ms depending on what ran before it. Round r
// takes the n entries in the order r, r+1, r-1, r+2, r-2, ... (mod n): over n rounds each entry
// comes first once and, for an even n, follows every other entry exactly once (a balanced Latin
// square); for an odd n, some entry twice and another never.
#pragma once
#include <cstddef>
#include <vector>

namespace gpt::bench {

inline std::vector<size_t> round_order(size_t round, size_t n) {
    std::vector<size_t> order;
    for (size_t k = 0; k < n; ++k) {
        const size_t offset = k % 2 ? (k + 1) / 2 : (n - k / 2) % n;  // 0, 1, n-1, 2, n-2, ...
        order.push_back((round + offset) % n);
    }
    return order;
}

}  // namespace gpt::bench
