// Matrix multiplication through cuBLASLt, in row-major terms:
//
//     C[M x N] = alpha · op(A) · op(B) + beta · C        op(X) = X or Xᵀ
//
// optionally batched (strided). The stages differ only in the arguments: the element types
// (fp32, then bf16) and the compute type, which each stage's precision names through
// MatmulMath below.
//
// Alignment: cuBLASLt's fast kernels load 16 bytes at a time. A bf16 matrix whose rows are an odd
// number of elements apart (the LM head's 50257 logits, attention scores at an odd T) is only
// 2-byte aligned, and for some such shapes cuBLASLt has no algorithm at all. Such a shape says so
// once on stderr and runs on padded copies: the operands are copied into scratch memory with rows
// 16 bytes and matrices 256 bytes apart, multiplied there, and the result is copied back.
// Slower, but every shape works.
//
// The algorithm: cuBLASLt's heuristic ranks its kernels for a shape by a model of the GPU, and its
// first choice is not always the fastest. Stages 00-03 take that first choice, as PyTorch eager
// does. From stage 04 on (the policy's kTimeMatmuls, the counterpart of torch.compile's
// mode="max-autotune") the first call of a shape asks for up to kCandidates,
// runs each a few times on the call's own operands and keeps the fastest for the rest of the run
// (the trainer's first step makes every first call, outside any recorded CUDA Graph). Trying an
// algorithm writes C, so only a call that overwrites C (beta = 0) and does not read what it
// writes is timed; a shape first met with beta != 0, or while a graph is recorded, keeps the
// heuristic's first choice. The weight gradients qualify because a step's first backward writes
// them with beta = 0 (train/gpt.h, zero_grad). With GPT_MATMUL_TIMING=off in the environment
// nothing is timed in any stage: the heuristic's first choice, the same from run to run (and the
// sanitizer runs, under which every timed run is slow, set it).
//
// Epilogues (stage 04): cuBLASLt can finish a product in the same kernel, before the result
// leaves the chip: add a bias, apply GELU (keeping its input for backward), apply GELU's
// derivative, or sum a bias gradient while it reads the operand. gemm() takes one as an
// Epilogue. Where cuBLASLt has no algorithm for the epilogue at that shape and alignment, gemm()
// queues nothing and returns false, and the caller does the same work with its own kernels: an
// epilogue never runs on padded copies.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/check.cuh"
#include "cuda/types.cuh"
#include "train/precision.h"
#include "util/error.h"

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

// What cuBLASLt does to a product before writing it, in row-major terms (C[M x N] = op(A)·op(B)):
//   kBias         C[m, n] += bias[n]                                 (bias: N elements of C's type)
//   kGeluAuxBias  aux[m, n] = C[m, n] + bias[n];  C[m, n] = gelu(aux[m, n])   (aux like C, row stride aux_ld)
//   kDGelu        C[m, n] *= gelu'(aux[m, n])                        (aux: the GELU's input, read)
//   kBGradB       bias_grad[m] = Σ_k op(A)[m, k], written (not added), in C's type: with op(A) = doutᵀ,
//                 the bias gradient of a linear layer, summed while the weight gradient reads dout
// [stage switch Epilogue]
struct Epilogue {
    enum Kind { kNone = 0, kBias, kGeluAuxBias, kDGelu, kBGradB };
    Kind kind = kNone;
    const void* bias = nullptr;  // kBias, kGeluAuxBias
    void* bias_grad = nullptr;   // kBGradB
    void* aux = nullptr;         // kGeluAuxBias (written), kDGelu (read)
    long long aux_ld = 0;        // elements between rows of aux

    static Epilogue add_bias(const void* bias) { return {kBias, bias}; }
    static Epilogue bias_then_gelu(const void* bias, void* pre, long long ld) {
        return {kGeluAuxBias, bias, nullptr, pre, ld};
    }
    static Epilogue times_gelu_derivative(const void* pre, long long ld) {
        return {kDGelu, nullptr, nullptr, const_cast<void*>(pre), ld};  // read, not written
    }
    static Epilogue bias_gradient(void* bias_grad) { return {kBGradB, nullptr, bias_grad}; }
};
// [end stage switch Epilogue]

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

inline long long round_up(long long n, long long multiple) { return (n + multiple - 1) / multiple * multiple; }

// The bytes [begin, end) that `count` row-major matrices of rows x cols span (rows ld elements
// apart, matrices stride apart); empty for a null pointer.
struct Span {
    uintptr_t begin = 0, end = 0;
    bool overlaps(const Span& o) const { return begin < o.end && o.begin < end; }
};
inline Span span(const void* p, long long rows, long long cols, long long ld, int count, long long stride,
                 size_t elem) {
    if (!p || rows <= 0 || cols <= 0) return {};
    const long long last = (count > 1 ? (count - 1) * stride : 0) + (rows - 1) * ld + cols;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    return {begin, begin + uintptr_t(last) * elem};
}

// `count` row-major matrices of rows x cols, from one strided layout to another (rows `ld`
// elements apart, matrices `stride` apart): one thread per element, grid-stride.
template <class T>
__global__ void copy_matrices_kernel(T* dst, long long dst_ld, long long dst_stride, const T* src, long long src_ld,
                                     long long src_stride, int rows, int cols, int count) {
    const long long per_matrix = (long long)rows * cols, n = per_matrix * count;
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step) {
        const long long b = i / per_matrix, r = (i % per_matrix) / cols, c = i % cols;
        dst[b * dst_stride + r * dst_ld + c] = src[b * src_stride + r * src_ld + c];
    }
}

template <class T>
void copy_matrices(cudaStream_t stream, T* dst, long long dst_ld, long long dst_stride, const T* src,
                   long long src_ld, long long src_stride, int rows, int cols, int count) {
    const long long n = (long long)rows * cols * count;
    if (n == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 65535));
    copy_matrices_kernel<<<blocks, 256, 0, stream>>>(dst, dst_ld, dst_stride, src, src_ld, src_stride, rows, cols,
                                                     count);
    LAUNCH_CHECK();
}

}  // namespace detail

// Whether the environment lets a stage that times matmul algorithms (the top of this file) do so:
// unless it says GPT_MATMUL_TIMING=off.
inline bool matmul_timing_on() {
    const char* value = std::getenv("GPT_MATMUL_TIMING");
    if (!value || std::string(value) == "on") return true;
    if (std::string(value) == "off") return false;
    throw Error(std::string("GPT_MATMUL_TIMING is '") + value + "'; it takes on or off");
}

// cuBLASLt handle, workspace and the algorithm chosen for each problem shape. One stream at a
// time: the padded copies of all shapes share one scratch area.
class GemmContext {
  public:
    static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
    static constexpr int kCandidates = 8;  // algorithms asked of the heuristic and timed, per shape
    static constexpr int kTimedRuns = 3;   // runs of each, after one untimed run (which loads its kernel)

    // The workspace is a DeviceBuffer, so the reported peak device memory includes it. The
    // heuristic's first choice until time_candidates(true) (a stage's kTimeMatmuls: cuda/backend.cuh).
    GemmContext() : workspace_(kWorkspaceBytes) {
        CUBLAS_CHECK(cublasLtCreate(&handle_));
    }
    ~GemmContext() {
        for (auto& [key, p] : plans_) p.release();
        cublasLtDestroy(handle_);
    }
    GemmContext(const GemmContext&) = delete;
    GemmContext& operator=(const GemmContext&) = delete;

    // The first call of a shape chooses its algorithm (and allocates its padded copies' scratch
    // if it needs them), so it must not be the first call inside a recorded CUDA Graph: the
    // trainer's warm-up step makes every call once before the step is recorded.
    // Returns false only for an epilogue cuBLASLt has no algorithm for: then nothing was queued.
    template <class T, class TC>
    bool gemm(cudaStream_t stream, cublasComputeType_t compute, bool trans_a, bool trans_b, int M, int N, int K,
              float alpha, const T* A, int lda, const T* B, int ldb, float beta, TC* C, int ldc, int batch = 1,
              long long stride_a = 0, long long stride_b = 0, long long stride_c = 0, const Epilogue& epilogue = {});

    // `bytes` of device memory for an op's own use between two gemm() calls (a bias gradient
    // that is then added to the running one), shared with the padded copies' scratch: like it,
    // allocated by the first call (the warm-up step), never inside a recorded CUDA Graph.
    void* scratch_for(size_t bytes, cudaStream_t stream, const std::string& what) {
        return scratch(bytes, stream, what);
    }

    // For tests: shapes first seen from now on run on padded copies, as if cuBLASLt had no
    // algorithm for them.
    void force_padded_copies(bool on) { force_padded_ = on; }
    // Shapes first seen from now on keep the heuristic's first choice (false, the default) or
    // take the fastest of its candidates (true), and faster_of() times its two ways or prefers
    // its first untimed. The stage's context sets it from kTimeMatmuls; tests set it directly.
    void time_candidates(bool on) { time_candidates_ = on; }
    bool times_candidates() const { return time_candidates_; }

    // Which of two ways of doing one piece of a matmul's work is faster, timed the first time
    // `what` is met and remembered for the rest of the run. Stage 04 asks whether a product with
    // its epilogue beats the plain product and a separate kernel (stages/04_fused_kernels/
    // matmul_epilogues.cuh), so that a slow epilogue never makes it slower than stage 03. Each
    // way queues its work and returns false where it cannot run (an epilogue cuBLASLt has no
    // algorithm for: nothing was queued). Timing runs each several times, so the caller says
    // whether that is harmless (`repeatable`: every run leaves the results one run leaves);
    // where it is not, or while a CUDA Graph is recorded, nothing is timed or remembered and
    // the first way is preferred. Returns 0 for `first`, 1 for `second`; the caller runs it.
    // [stage switch kTimeMatmuls]
    template <class First, class Second>
    int faster_of(cudaStream_t stream, const std::string& what, bool repeatable, First&& first, Second&& second) {
        for (const WayChoice& c : ways_)
            if (c.what == what) return c.chosen;
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
        if (!repeatable || !time_candidates_ || capturing != cudaStreamCaptureStatusNone) return 0;
        WayChoice c{what, {time_runs(stream, first), time_runs(stream, second)}, 0};
        c.chosen = c.ms[0] < 0 || (c.ms[1] >= 0 && c.ms[1] < c.ms[0]) ? 1 : 0;
        ways_.push_back(c);
        return c.chosen;
    }
    // [end stage switch kTimeMatmuls]
    struct WayChoice {
        std::string what;
        float ms[2];  // each way's mean time; -1: it cannot run
        int chosen;
    };
    const std::vector<WayChoice>& way_choices() const { return ways_; }
    // Device memory held for padded copies (counted in MemoryStats, like every DeviceBuffer).
    size_t scratch_bytes() const {
        size_t total = 0;
        for (const auto& area : scratch_) total += area.size();
        return total;
    }
    // What the last gemm() ran, for tests of the arithmetic the library chose.
    struct Algorithm {
        uint64_t numerical_impl = 0;  // cublasLtNumericalImplFlags_t (tensor cores? TF32 inputs?), 0: unknown
        bool padded = false;          // on padded copies
        bool unsupported = false;     // an epilogue cuBLASLt has no algorithm for: nothing runs
        int candidates = 0;           // algorithms the heuristic offered (at most kCandidates)
        int timed = 0;                // of those, how many were timed (0: the first was kept untimed)
        int chosen = 0;               // the one in use, by the heuristic's rank (0: its first choice)
        float ms_first = -1, ms_chosen = -1;  // mean ms of a run of the first and of the chosen; -1: not timed
    };
    const Algorithm& last_algorithm() const { return last_; }
    // Every shape met so far, with what was chosen for it: the kernel benchmark reports them.
    struct Choice {
        std::string shape;  // "bf16 768x3072x16384 Aᵀ" and its epilogue
        double flops = 0;   // 2·M·N·K·batch
        Algorithm algorithm;
    };
    std::vector<Choice> choices() const {
        std::vector<Choice> all;
        for (const auto& [key, p] : plans_) all.push_back({p.shape, p.flops, p.info});
        return all;
    }

  private:
    // Everything the algorithm choice depends on.
    using Key = std::tuple<int, int, int, bool, bool, int, int, int, int, int, int, int, long long, long long,
                           long long, int, int, int, bool, int, long long, int>;
    // Where a padded copy lives in the scratch, and its layout there.
    struct Copy {
        size_t offset = 0;
        long long ld = 0, stride = 0;
        int count = 1;  // matrices stored: 1 for an operand every batch shares (stride 0)
    };
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        cublasLtMatmulAlgo_t algo{};
        std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first; emptied once chosen
        Algorithm info;
        std::string shape;  // for choices()
        double flops = 0;
        unsigned char* scratch = nullptr;  // padded plans only
        Copy copy_a, copy_b, copy_c;

        void release() {
            if (a) cublasLtMatrixLayoutDestroy(a);
            if (b) cublasLtMatrixLayoutDestroy(b);
            if (c) cublasLtMatrixLayoutDestroy(c);
            if (op) cublasLtMatmulDescDestroy(op);
            a = b = c = nullptr;
            op = nullptr;
        }
    };
    // The row-major matrices of one call, as cuBLASLt's heuristic sees them.
    struct Problem {
        cublasComputeType_t compute;
        cudaDataType_t type, type_c;
        bool trans_a, trans_b;
        int M, N, K, batch;
        Epilogue epilogue;
    };
    struct Operand {
        long long ld, stride;
        int align;  // bytes
    };

    // Describes the problem to cuBLASLt in p and asks for an algorithm: CUBLAS_STATUS_SUCCESS
    // when there is one (the heuristic's own status otherwise, NOT_SUPPORTED if it found none).
    cublasStatus_t choose(Plan& p, const Problem& pr, Operand a, Operand b, Operand c) {
        // cuBLAS is column-major. A row-major matrix is its transpose in column-major, so we ask
        // for Cᵀ = op(B)ᵀ · op(A)ᵀ: the operands swap places and keep their op flags.
        const cublasOperation_t op_first = pr.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // applied to B
        const cublasOperation_t op_second = pr.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // applied to A
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, pr.compute, CUDA_R_32F));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
        // [stage switch Epilogue]
        if (pr.epilogue.kind != Epilogue::kNone) {
            const cublasLtEpilogue_t kind = lt_epilogue(pr.epilogue.kind);
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &kind, sizeof(kind)));
            if (pr.epilogue.aux) {
                const int64_t ld = pr.epilogue.aux_ld;
                CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
            }
            // The heuristic reads the pointers' alignment from these.
            set_epilogue_pointers(p, pr.epilogue);
        }
        // [end stage switch Epilogue]
        // Stored shapes (column-major rows x cols) of the two operands and of the result.
        const int M = pr.M, N = pr.N, K = pr.K;
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, pr.type, pr.trans_b ? K : N, pr.trans_b ? N : K, b.ld));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, pr.type, pr.trans_a ? M : K, pr.trans_a ? K : M, a.ld));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, pr.type_c, N, M, c.ld));
        if (pr.batch > 1) {
            const std::tuple<cublasLtMatrixLayout_t, long long> layouts[] = {
                {p.a, b.stride}, {p.b, a.stride}, {p.c, c.stride}};
            for (const auto& [layout, stride] : layouts) {
                CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &pr.batch,
                                                              sizeof(pr.batch)));
                CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &stride, sizeof(stride)));
            }
        }
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const size_t ws = kWorkspaceBytes;
        const uint32_t a_bytes = b.align, b_bytes = a.align, c_bytes = c.align;  // swapped, as above
        const std::tuple<cublasLtMatmulPreferenceAttributes_t, const void*, size_t> prefs[] = {
            {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_bytes, sizeof(a_bytes)},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_bytes, sizeof(b_bytes)},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_bytes, sizeof(c_bytes)},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_bytes, sizeof(c_bytes)}};
        for (const auto& [attribute, value, size] : prefs) {
            const cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, attribute, value, size);
            if (s != CUBLAS_STATUS_SUCCESS) {
                cublasLtMatmulPreferenceDestroy(pref);
                CUBLAS_CHECK(s);
            }
        }
        cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
        int found = 0;
        // Not CUBLAS_CHECK: "no algorithm" may come back as an error status (NOT_SUPPORTED).
        const cublasStatus_t status =
            cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, kCandidates, results, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
        p.candidates.clear();
        for (int i = 0; i < found; ++i)
            if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
        if (p.candidates.empty()) return CUBLAS_STATUS_NOT_SUPPORTED;
        p.info.candidates = static_cast<int>(p.candidates.size());
        use(p, 0);
        return CUBLAS_STATUS_SUCCESS;
    }

    // Makes the heuristic's i-th candidate the plan's algorithm.
    static void use(Plan& p, int i) {
        p.algo = p.candidates[i];
        p.info.chosen = i;
        uint64_t impl = 0;
        size_t written = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&p.algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &impl, sizeof(impl),
                                              &written) != CUBLAS_STATUS_SUCCESS)
            impl = 0;
        p.info.numerical_impl = impl;
    }

    // [stage switch kTimeMatmuls]
    // Times every candidate of p on this call's operands and keeps the fastest; run(algo) queues
    // one product with that algorithm. One untimed run first: it loads the kernel and skips a
    // candidate the library refuses at run time.
    template <class Run>
    void pick_fastest(Plan& p, cudaStream_t stream, Run&& run) {
        int best = -1;
        float best_ms = -1;
        for (int i = 0; i < int(p.candidates.size()); ++i) {
            const float ms = time_runs(stream, [&] { return run(p.candidates[i]) == CUBLAS_STATUS_SUCCESS; });
            if (ms < 0) continue;
            ++p.info.timed;
            if (i == 0) p.info.ms_first = ms;
            if (best < 0 || ms < best_ms) {
                best = i;
                best_ms = ms;
            }
        }
        if (best < 0) best = 0;  // none ran: the first, which the real call then reports on
        use(p, best);
        p.info.ms_chosen = best_ms;
    }

    // The mean time in ms of one run of `run` (it queues work on `stream` and returns whether it
    // could), over kTimedRuns after an untimed one that loads its kernels; -1 if it could not run.
    template <class Run>
    static float time_runs(cudaStream_t stream, Run&& run) {
        if (!run()) return -1.0f;
        cudaEvent_t start, stop;
        CUDA_CHECK(cudaEventCreate(&start));
        CUDA_CHECK(cudaEventCreate(&stop));
        CUDA_CHECK(cudaEventRecord(start, stream));
        for (int r = 0; r < kTimedRuns; ++r) run();
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        return ms / kTimedRuns;
    }
    // [end stage switch kTimeMatmuls]

    // At least `bytes` of scratch. A larger area is added, never swapped in: a CUDA Graph
    // recorded earlier may still read and write the older one. Each new area is at least twice the
    // last, so that shapes growing one by one (sampling's T) keep few of them.
    unsigned char* scratch(size_t bytes, cudaStream_t stream, const std::string& shape) {
        if (scratch_.empty() || scratch_.back().size() < bytes) {
            cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
            CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
            if (capturing != cudaStreamCaptureStatusNone)
                throw Error("the " + shape + " matmul needs padded copies, but its first call is being recorded " +
                            "as a CUDA Graph, where memory cannot be allocated: run it once before recording");
            scratch_.emplace_back(std::max(bytes, scratch_.empty() ? size_t(0) : 2 * scratch_.back().size()));
        }
        return scratch_.back().data();
    }

    // [stage switch Epilogue]
    // The same kinds, swapped into cuBLASLt's column-major view (see choose()): our bias over C's
    // columns is its bias over D's rows, and our op(A) is its B.
    static cublasLtEpilogue_t lt_epilogue(Epilogue::Kind kind) {
        switch (kind) {
            case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
            case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
            case Epilogue::kDGelu: return CUBLASLT_EPILOGUE_DGELU;
            case Epilogue::kBGradB: return CUBLASLT_EPILOGUE_BGRADB;
            default: return CUBLASLT_EPILOGUE_DEFAULT;
        }
    }
    static void set_epilogue_pointers(Plan& p, const Epilogue& e) {
        const void* bias = e.kind == Epilogue::kBGradB ? e.bias_grad : e.bias;
        if (bias)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        if (e.aux)
            CUBLAS_CHECK(
                cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
    }
    // [end stage switch Epilogue]

    // [stage switch kTimeMatmuls]
    // Whether this call can run several times in a row without changing its result: it
    // overwrites C (beta = 0), nothing it writes is something it reads, and no CUDA Graph is
    // being recorded (timing waits for the device).
    template <class T, class TC>
    static bool repeatable(cudaStream_t stream, float beta, bool trans_a, bool trans_b, int M, int N, int K,
                           const T* A, int lda, long long stride_a, const T* B, int ldb, long long stride_b,
                           const TC* C, int ldc, long long stride_c, int batch, const Epilogue& e) {
        if (beta != 0.0f) return false;
        cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
        CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
        if (capturing != cudaStreamCaptureStatusNone) return false;
        const detail::Span read[] = {
            detail::span(A, trans_a ? K : M, trans_a ? M : K, lda, batch, stride_a, sizeof(T)),
            detail::span(B, trans_b ? N : K, trans_b ? K : N, ldb, batch, stride_b, sizeof(T)),
            detail::span(e.kind == Epilogue::kDGelu ? e.aux : nullptr, M, N, e.aux_ld, 1, 0, sizeof(TC)),
            detail::span(e.bias, 1, N, N, 1, 0, sizeof(TC))};
        const detail::Span written[] = {
            detail::span(C, M, N, ldc, batch, stride_c, sizeof(TC)),
            detail::span(e.kind == Epilogue::kGeluAuxBias ? e.aux : nullptr, M, N, e.aux_ld, 1, 0, sizeof(TC)),
            detail::span(e.kind == Epilogue::kBGradB ? e.bias_grad : nullptr, 1, M, M, 1, 0, sizeof(TC))};
        for (const detail::Span& w : written)
            for (const detail::Span& r : read)
                if (w.overlaps(r)) return false;
        return true;
    }
    // [end stage switch kTimeMatmuls]

    static const char* epilogue_name(Epilogue::Kind kind) {
        switch (kind) {
            case Epilogue::kBias: return " +bias";
            case Epilogue::kGeluAuxBias: return " +bias+GELU";
            case Epilogue::kDGelu: return " ·GELU'";
            case Epilogue::kBGradB: return " +bias gradient";
            default: return "";
        }
    }

    static std::string type_name(cudaDataType_t type, cublasComputeType_t compute) {
        if (type == CUDA_R_16BF) return "bf16";
        return compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "tf32" : "fp32";
    }

    cublasLtHandle_t handle_ = nullptr;
    DeviceBuffer<unsigned char> workspace_;
    std::vector<DeviceBuffer<unsigned char>> scratch_;  // for padded copies; the newest is the largest
    std::map<Key, Plan> plans_;
    std::set<std::string> reported_;  // notes already printed on stderr
    bool force_padded_ = false;
    bool time_candidates_ = false;
    std::vector<WayChoice> ways_;  // faster_of()'s answers
    Algorithm last_;
};

template <class T, class TC>
bool GemmContext::gemm(cudaStream_t stream, cublasComputeType_t compute, bool trans_a, bool trans_b, int M, int N,
                       int K, float alpha, const T* A, int lda, const T* B, int ldb, float beta, TC* C, int ldc,
                       int batch, long long stride_a, long long stride_b, long long stride_c,
                       const Epilogue& epilogue) {
    // Row-major stored shapes (rows x cols, rows ld elements apart) of A, B and C.
    const int rows_a = trans_a ? K : M, cols_a = trans_a ? M : K;
    const int rows_b = trans_b ? N : K, cols_b = trans_b ? K : N;
    const Problem pr{compute, cuda_type<T>(), cuda_type<TC>(), trans_a, trans_b, M, N, K, batch, epilogue};
    const bool with_epilogue = epilogue.kind != Epilogue::kNone;
    const std::string type = type_name(pr.type, compute);
    auto shape = [&] {
        return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
               (batch > 1 ? " (batch of " + std::to_string(batch) + ")" : std::string());
    };
    if (lda < cols_a || ldb < cols_b || ldc < N)
        throw Error("gemm: a leading dimension is shorter than its matrix's rows in a " + type + " " + shape() +
                    " matmul (" + std::to_string(lda) + ", " + std::to_string(ldb) + ", " + std::to_string(ldc) +
                    ")");

    const int align_a = detail::alignment(A, lda, stride_a, sizeof(T));
    const int align_b = detail::alignment(B, ldb, stride_b, sizeof(T));
    const int align_c = detail::alignment(C, ldc, stride_c, sizeof(TC));
    // The epilogue's vectors and matrix: their alignment decides the algorithm too.
    const int align_epilogue =
        std::min({detail::alignment(epilogue.bias, 0, 0, 1), detail::alignment(epilogue.bias_grad, 0, 0, 1),
                  detail::alignment(epilogue.aux, epilogue.aux_ld, 0, sizeof(TC))});
    const Key key{int(compute), int(pr.type), int(pr.type_c), trans_a, trans_b, M, N, K, lda, ldb, ldc, batch,
                  stride_a, stride_b, stride_c, align_a, align_b, align_c, force_padded_, int(epilogue.kind),
                  epilogue.aux_ld, align_epilogue};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
        Plan p;
        cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
        // cuBLASLt wants an aux matrix's rows a multiple of 8 elements apart; for batched products
        // the epilogue's vectors would need strides too, which no caller needs.
        const bool epilogue_possible =
            !with_epilogue || (batch == 1 && (!epilogue.aux || epilogue.aux_ld % 8 == 0));
        if (!force_padded_ && epilogue_possible)
            status = choose(p, pr, {lda, stride_a, align_a}, {ldb, stride_b, align_b}, {ldc, stride_c, align_c});
        // [stage switch Epilogue]
        if (status != CUBLAS_STATUS_SUCCESS && with_epilogue) {
            // The caller runs the epilogue's work itself (see the top of this file).
            p.release();
            p.info.unsupported = true;
        }
        // [end stage switch Epilogue]
        if (status != CUBLAS_STATUS_SUCCESS && !with_epilogue) {
            p.release();
            const std::string note = "cuBLASLt has no " + type + " algorithm for a " + shape() +
                                     " matmul with leading dimensions " + std::to_string(lda) + ", " +
                                     std::to_string(ldb) + ", " + std::to_string(ldc) + " (" +
                                     cublasGetStatusName(status) + "); using 16-byte-aligned padded copies (slower)";
            if (!force_padded_ && reported_.insert(note).second) std::fprintf(stderr, "%s\n", note.c_str());
            // Rows 16 bytes apart, each matrix and each operand on a 256-byte boundary.
            size_t bytes = 0;
            auto place = [&](Copy& copy, int rows, int cols, long long stride, size_t elem) {
                copy.ld = detail::round_up(cols, static_cast<long long>(16 / elem));
                const long long matrix = detail::round_up(rows * copy.ld, static_cast<long long>(256 / elem));
                const bool shared = batch > 1 && stride == 0;  // every batch reads the same matrix
                copy.count = shared ? 1 : batch;
                copy.stride = shared ? 0 : matrix;
                copy.offset = bytes;
                bytes += size_t(copy.count) * matrix * elem;
            };
            place(p.copy_a, rows_a, cols_a, stride_a, sizeof(T));
            place(p.copy_b, rows_b, cols_b, stride_b, sizeof(T));
            place(p.copy_c, M, N, stride_c, sizeof(TC));
            p.scratch = scratch(bytes, stream, type + " " + shape());
            auto padded = [&](const Copy& copy, size_t elem) {
                const int align = detail::alignment(p.scratch + copy.offset, copy.ld, copy.stride, elem);
                return Operand{copy.ld, copy.stride, align};
            };
            const cublasStatus_t again =
                choose(p, pr, padded(p.copy_a, sizeof(T)), padded(p.copy_b, sizeof(T)), padded(p.copy_c, sizeof(TC)));
            if (again != CUBLAS_STATUS_SUCCESS) {
                p.release();
                throw Error("cuBLASLt has no " + type + " algorithm for a " + shape() +
                            " matmul, not even on 16-byte-aligned padded copies (" + cublasGetStatusName(again) + ")");
            }
            p.info.padded = true;
        }
        p.shape = type + " " + shape() + (trans_a ? " Aᵀ" : "") + (trans_b ? " Bᵀ" : "") +
                  epilogue_name(epilogue.kind);
        p.flops = 2.0 * M * N * double(K) * batch;
        auto run_with = [&](const cublasLtMatmulAlgo_t& algo) {
            return cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &algo,
                                  workspace_.data(), kWorkspaceBytes, stream);
        };
        // [stage switch kTimeMatmuls]
        if (!p.info.padded && !p.info.unsupported && p.candidates.size() > 1 && time_candidates_ &&
            repeatable(stream, beta, trans_a, trans_b, M, N, K, A, lda, stride_a, B, ldb, stride_b, C, ldc, stride_c,
                       batch, epilogue)) {
            if (with_epilogue) set_epilogue_pointers(p, epilogue);
            pick_fastest(p, stream, run_with);
        }
        // [end stage switch kTimeMatmuls]
        p.candidates.clear();
        it = plans_.emplace(key, p).first;
    }
    Plan& p = it->second;
    last_ = p.info;
    if (p.info.unsupported) return false;
    if (!p.info.padded) {
        if (with_epilogue) set_epilogue_pointers(p, epilogue);  // this call's vectors (same alignment)
        CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C, p.c, C, p.c, &p.algo,
                                    workspace_.data(), kWorkspaceBytes, stream));
        return true;
    }
    // Padded copies: in, multiply, out. C is read only when beta is not 0.
    T* a = reinterpret_cast<T*>(p.scratch + p.copy_a.offset);
    T* b = reinterpret_cast<T*>(p.scratch + p.copy_b.offset);
    TC* c = reinterpret_cast<TC*>(p.scratch + p.copy_c.offset);
    detail::copy_matrices(stream, a, p.copy_a.ld, p.copy_a.stride, A, lda, stride_a, rows_a, cols_a, p.copy_a.count);
    detail::copy_matrices(stream, b, p.copy_b.ld, p.copy_b.stride, B, ldb, stride_b, rows_b, cols_b, p.copy_b.count);
    if (beta != 0.0f)
        detail::copy_matrices(stream, c, p.copy_c.ld, p.copy_c.stride, C, ldc, stride_c, M, N, p.copy_c.count);
    CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                                workspace_.data(), kWorkspaceBytes, stream));
    detail::copy_matrices(stream, C, ldc, stride_c, c, p.copy_c.ld, p.copy_c.stride, M, N, p.copy_c.count);
    return true;
}

}  // namespace gpt::cuda
