// Every CUDA and cuBLAS call is checked; a failure becomes a gpt::Error with one line that
// names the call, the file and line. Out-of-memory gets its own advice.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "util/error.h"

namespace gpt::cuda {

inline void check(cudaError_t err, const char* what, const char* file, int line) {
    if (err == cudaSuccess) return;
    std::string msg = std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " +
                      what + " at " + file + ":" + std::to_string(line);
    if (err == cudaErrorMemoryAllocation)
        msg = std::string("out of device memory in ") + what + " (try a smaller --batch or --model)";
    throw Error(msg);
}

inline void check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status == CUBLAS_STATUS_SUCCESS) return;
    throw Error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " in " + what + " at " + file + ":" +
                std::to_string(line));
}

}  // namespace gpt::cuda

#define CUDA_CHECK(call) ::gpt::cuda::check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::gpt::cuda::check((call), #call, __FILE__, __LINE__)
// After every kernel launch: catches bad launch configurations at once (execution errors
// surface at the next synchronising call, which is checked too).
#define LAUNCH_CHECK() ::gpt::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
