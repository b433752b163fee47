// A kernel whose body is the exercise: the stub is EXERCISE_NOT_WRITTEN.
#pragma once
#include "cuda/exercise.cuh"

__global__ void scale_kernel(float* out, const float* in, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // EXERCISE BEGIN stage00.scale TESTS Kernels\.Scale|Model\..*
    out[i] = a * in[i];  // brackets [ ], a semicolon; and a backslash \ survive the copy
    // EXERCISE END
}

#define TWICE(x) \
    ((x) + (x))
