// An exercise that does not say which tests check it.
__device__ float f(float x) {
    // EXERCISE BEGIN stage00.no_tests
    return x;
    // EXERCISE END
}
