// The same exercise name twice.
__device__ float f(float x) {
    // EXERCISE BEGIN stage00.identity TESTS Math\.F
    return x;
    // EXERCISE END
}
__device__ float g(float x) {
    // EXERCISE BEGIN stage00.identity TESTS Math\.G
    return x;
    // EXERCISE END
}
