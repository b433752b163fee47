// How a trainer starts: the processes of the run meet, and each takes its own GPU.
#pragma once
#include <exception>
#include <memory>

#include "dist/group.h"
#include "train/parallel.h"
#include "train/policy.h"
#include "util/error.h"

namespace gpt {

// The processes of the run meet (one, without a launcher), each takes its own GPU, and only then
// does any CUDA object exist: a stream, an allocation or a library handle belongs to the GPU that
// was current when it was made. Training and generation both start here.
template <class S>
std::unique_ptr<typename Ops<S>::Parallel> join_the_run(const ParallelSettings& settings) {
    // Before the first CUDA call, which reads it (dist/group.h). A launcher environment that does
    // not fit together is reported where the processes meet, below.
    try {
        dist::load_kernels_eagerly_with_several_processes(dist::launch_from_environment());
    } catch (const Error&) {
    }
    S::require_a_device();  // no GPU at all: one line, before waiting for anyone
    auto parallel = std::make_unique<typename Ops<S>::Parallel>(settings);
    try {
        check_stage_device<S>();  // the GPU this process took, or one this stage cannot use: one line
    } catch (const std::exception& e) {
        parallel->fail(e);  // the others must not wait for this process
        throw;
    }
    return parallel;
}

}  // namespace gpt
