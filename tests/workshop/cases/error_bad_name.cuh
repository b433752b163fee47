// An exercise name that is not stageNN.<snake_case>.
__device__ float f(float x) {
    // EXERCISE BEGIN LayerNormForward TESTS Math\.F
    return x;
    // EXERCISE END
}
