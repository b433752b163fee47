// An exercise that is never closed.
__device__ float f(float x) {
    // EXERCISE BEGIN stage00.open TESTS Math\.F
    return x;
}
