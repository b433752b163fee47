// A misspelt marker.
__device__ float f(float x) {
    // EXERCISE BEGIN stage00.identity TESTS Math\.F
    return x;
    // EXERCISE ENDS
}
