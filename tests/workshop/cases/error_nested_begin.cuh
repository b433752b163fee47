// An exercise opened inside another.
__device__ float f(float x) {
    // EXERCISE BEGIN stage00.outer TESTS Math\.F
    float y = x;
    // EXERCISE BEGIN stage00.inner TESTS Math\.F
    return y;
    // EXERCISE END
    // EXERCISE END
}
