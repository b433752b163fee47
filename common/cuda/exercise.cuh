// Workshop exercises (docs/workshop.md). In a workshop build the region between
// `// EXERCISE BEGIN <name>` and `// EXERCISE END` is replaced by EXERCISE_NOT_WRITTEN(<name>):
// in a kernel it prints one line (from the first thread only) and returns, leaving the outputs
// unwritten so that the tests fail on them; in host code it throws. Never a crash or a hang.
#pragma once
#include <cstdio>
#include <string>

#include "util/error.h"

namespace gpt {
struct ExerciseNotWritten : Error {
    explicit ExerciseNotWritten(const std::string& name)
        : Error("exercise " + name + " is not written yet (see docs/workshop.md and the stage's chapter)") {}
};
}  // namespace gpt

#ifdef __CUDA_ARCH__
#define EXERCISE_NOT_WRITTEN(name)                                                                            \
    do {                                                                                                      \
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0)    \
            printf("exercise %s is not written yet (see docs/workshop.md)\n", name);                          \
        return;                                                                                               \
    } while (0)
#else
#define EXERCISE_NOT_WRITTEN(name) throw ::gpt::ExerciseNotWritten(name)
#endif
