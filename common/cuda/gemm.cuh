// Matrix multiplication through cuBLASLt, in row-major terms:
//
//     C[M x N] = alpha · op(A) · op(B) + beta · C        op(X) = X or Xᵀ
//
// optionally batched (strided). The stages differ only in the arguments: the element types
// (fp32, then bf16) and the compute type, which each stage's precision names through
// MatmulMath below.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "cuda/check.cuh"
#include "cuda/types.cuh"
#include "train/precision.h"

namespace gpt::cuda {

// The cuBLAS compute type of a stage's Precision. Declared here and defined by the stage that
// introduces the precision, each with its `compute` type and its `source` file:
//   FP32  stages/00_fp32_baseline/matmul.cuh  CUBLAS_COMPUTE_32F: fp32 math, no tensor cores
//   TF32  stages/01_tf32/tf32.cuh             fp32 data on tensor cores, operands rounded to TF32
//   BF16  stages/02_bf16_autocast/bf16_math.cuh  bf16 data on tensor cores, fp32 sums
// The CUDA context takes it from the policy's kPrecision (cuda/backend.cuh), so a stage that
// declares a precision gets its arithmetic without re-declaring any op.
template <Precision P>
struct MatmulMath;

// cuBLASLt handle, workspace and the algorithm chosen for each problem shape.
class GemmContext {
  public:
    static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

    GemmContext() {
        CUBLAS_CHECK(cublasLtCreate(&handle_));
        CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
    }
    ~GemmContext() {
        for (auto& [key, p] : plans_) {
            cublasLtMatrixLayoutDestroy(p.a);
            cublasLtMatrixLayoutDestroy(p.b);
            cublasLtMatrixLayoutDestroy(p.c);
            cublasLtMatmulDescDestroy(p.op);
        }
        cudaFree(workspace_);
        cublasLtDestroy(handle_);
    }
    GemmContext(const GemmContext&) = delete;
    GemmContext& operator=(const GemmContext&) = delete;

    template <class T, class TC>
    void gemm(cudaStream_t stream, cublasComputeType_t compute, bool trans_a, bool trans_b, int M, int N, int K,
              float alpha, const T* A, int lda, const T* B, int ldb, float beta, TC* C, int ldc, int batch = 1,
              long long stride_a = 0, long long stride_b = 0, long long stride_c = 0);

  private:
    // Everything the algorithm choice depends on.
    using Key = std::tuple<int, int, int, bool, bool, int, int, int, int, int, int, int, long long, long long,
                           long long, int, int, int>;
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulAlgo_t algo{};
    };

    cublasLtHandle_t handle_ = nullptr;
    void* workspace_ = nullptr;
    std::map<Key, Plan> plans_;
};

namespace detail {
// The largest power of two (up to 16 bytes) that divides the address and the element steps:
// cuBLASLt must not pick a kernel that needs more alignment than the data has.
inline int alignment(const void* p, long long ld_elems, long long stride_elems, size_t elem) {
    int a = 16;
    auto fits = [&](unsigned long long v) {
        while (a > 1 && v % a) a /= 2;
    };
    fits(reinterpret_cast<uintptr_t>(p));
    fits(static_cast<unsigned long long>(ld_elems * elem));
    if (stride_elems) fits(static_cast<unsigned long long>(stride_elems * elem));
    return a;
}
}  // namespace detail

template <class T, class TC>
void GemmContext::gemm(cudaStream_t stream, cublasComputeType_t compute, bool trans_a, bool trans_b, int M, int N,
                       int K, float alpha, const T* A, int lda, const T* B, int ldb, float beta, TC* C, int ldc,
                       int batch, long long stride_a, long long stride_b, long long stride_c) {
    // cuBLAS is column-major. A row-major matrix is its transpose in column-major, so we ask
    // for Cᵀ = op(B)ᵀ · op(A)ᵀ: the operands swap places and keep their op flags.
    const int align_a = detail::alignment(A, lda, stride_a, sizeof(T));
    const int align_b = detail::alignment(B, ldb, stride_b, sizeof(T));
    const int align_c = detail::alignment(C, ldc, stride_c, sizeof(TC));
    const Key key{int(compute), int(cuda_type<T>()), int(cuda_type<TC>()), trans_a, trans_b, M, N, K, lda, ldb, ldc,
                  batch, stride_a, stride_b, stride_c, align_a, align_b, align_c};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
        Plan p;
        const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // applied to B
        const cublasOperation_t op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // applied to A
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
        // Stored shapes (column-major rows x cols) of the two operands and of the result.
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, cuda_type<T>(), trans_b ? K : N, trans_b ? N : K, ldb));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, cuda_type<T>(), trans_a ? M : K, trans_a ? K : M, lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, cuda_type<TC>(), N, M, ldc));
        if (batch > 1) {
            const std::tuple<cublasLtMatrixLayout_t, long long> layouts[] = {
                {p.a, stride_b}, {p.b, stride_a}, {p.c, stride_c}};
            for (const auto& [layout, stride] : layouts) {
                CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                              sizeof(batch)));
                CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof(stride)));
            }
        }
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const size_t ws = kWorkspaceBytes;
        const uint32_t a_bytes = align_b, b_bytes = align_a, c_bytes = align_c;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_bytes,
                                                          sizeof(a_bytes)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_bytes,
                                                          sizeof(b_bytes)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_bytes,
                                                          sizeof(c_bytes)));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_bytes,
                                                          sizeof(c_bytes)));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found));
        cublasLtMatmulPreferenceDestroy(pref);
        if (found == 0)
            throw Error("cuBLASLt has no algorithm for a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                        std::to_string(K) + " matmul with these types");
        p.algo = result.algo;
        it = plans_.emplace(key, p).first;
    }
    const Plan& p = it->second;
    CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo, workspace_,
                                kWorkspaceBytes, stream));
}

}  // namespace gpt::cuda
