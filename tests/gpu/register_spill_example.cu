// Built by registers.spill_is_found only, never run: a kernel that must use local memory, to show
// that tests/gpu/register_check.py finds it. __launch_bounds__(1024, 2) leaves 32 registers a
// thread, and an array indexed by a value known only at run time cannot live in registers at all.
#include <cuda_runtime.h>

namespace gpt {

__global__ void __launch_bounds__(1024, 2) must_spill_kernel(float* out, const int* index, int n) {
    float a[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) a[i] = out[threadIdx.x + i * 1024];
    for (int j = 0; j < n; ++j) a[index[j] & 63] += a[(index[j] >> 6) & 63];
    out[threadIdx.x] = a[0] + a[63];
}

}  // namespace gpt
