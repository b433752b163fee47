// Idle OpenMP threads sleep instead of spinning, unless the user chose otherwise.
//
// By default libgomp's idle threads spin for about 3 ms before they sleep. On a machine whose
// cores another program also uses, the spinning threads take turns with it: with two threads on
// two busy cores a training step took 1.45 s instead of 0.64 s, and text generation ran at
// 3 tokens/s instead of 170 (README.md, "If a step is much slower than quoted"). Sleeping
// threads (OMP_WAIT_POLICY=passive) cost a few percent on an idle machine.
//
// OpenMP reads OMP_WAIT_POLICY once, when its library starts, which is before main() and before
// any code of the program can set it (the C library resets the environment after the earliest
// hook, .preinit_array). So a program that wants it and finds it unset sets it and runs itself
// again (exec: same process, arguments and open files, a millisecond).
#pragma once
#include <cstdlib>

#include <unistd.h>

namespace gpt {

// Called before main() (common/cpu/main_cpu.cpp). A debugger follows the exec; valgrind does
// only with --trace-children=yes (or run it with OMP_WAIT_POLICY set).
inline void run_again_with_sleeping_threads(int, char** argv, char**) {
    if (std::getenv("OMP_WAIT_POLICY")) return;  // the user's choice, or this is the second run
    setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // the exec failed: go on as OpenMP started, spinning
}

// What OpenMP's idle threads do, for the banner: the policy it started with, "" if unset.
inline const char* openmp_wait_policy() {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    return policy ? policy : "";
}

}  // namespace gpt
