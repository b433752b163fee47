// Two exercises in one file, one of them indented deeper, and text between them kept as is.
#pragma once
#include "cuda/exercise.cuh"

__device__ float square(float x) {
    // EXERCISE BEGIN stage00.square TESTS Math\.Square
    // Write exercise stage00.square here, in place of the placeholder below.
    // What to write, and hints: docs/00_fp32_baseline.md#exercise
    // Test it: tests/workshop_check.sh stage00.square
    EXERCISE_NOT_WRITTEN("stage00.square");
    // EXERCISE END
}

// Mentioning "// EXERCISE BEGIN" inside a line is not a marker.
__global__ void relu_kernel(float* out, const float* in, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        // EXERCISE BEGIN stage00.relu TESTS Kernels\.Relu.*
        // (The solution of stage00.relu, in place: this copy is for exercise stage00.square.)
        out[i] = in[i] > 0.0f ? in[i] : 0.0f;
        // EXERCISE STUB (void)out;
        // EXERCISE STUB EXERCISE_NOT_WRITTEN("stage00.relu");
        // EXERCISE END
    }
}
