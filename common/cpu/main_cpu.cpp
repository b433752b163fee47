// `train` of the cpu preset: the shared main with the CPU reference policy.
#include "cpu/openmp_wait.h"
#include "cpu/reference_stage.h"

// Before main(): idle OpenMP threads sleep (cpu/openmp_wait.h). An .init_array entry, unlike a
// plain constructor, receives the program's arguments.
[[gnu::section(".init_array"), gnu::used]] static void (*const sleeping_threads)(int, char**, char**) =
    gpt::run_again_with_sleeping_threads;

#define GPT_STAGE gpt::CpuReference
#include "train/main.inl"
