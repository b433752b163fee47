// The default `Parallel` piece of a stage policy: one process. Stage 06 replaces it with data
// parallelism over NCCL; the training loop and the data loader take rank and world from it,
// and the model graph calls its reductions, so that no other code changes.
#pragma once
#include <cstddef>

namespace gpt {

struct SingleProcess {
    static constexpr const char* source = __FILE__;

    int rank() const { return 0; }
    int world() const { return 1; }
    // Sums n values over all processes, in place, on the device's timeline (the parameter
    // gradients; the loss of a step). With one process the sum is the value itself.
    template <class Context, class T>
    void all_reduce_sum(Context&, T*, size_t) {}
};

}  // namespace gpt
