// bench_stageNN: the kernel benchmark of one stage. Every op of the stage, forward and backward,
// at the shapes of GPT-2 124M (one layer's ops: C = 768, 12 heads of 64, V = 50257, T = 1024), for
// each batch size asked for: the median time of warm runs, the bytes and FLOPs the op must at
// least move and compute (train/op_cost.h), the GB/s and TFLOP/s that makes, and the fraction of the
// ceiling that bounds the op (copy bandwidth or bf16 GEMM throughput), measured on the same GPU
// in the same run (measure.cuh, shared with bench_ceilings).
//
// The ops are called through Ops<S>, exactly as the model graph calls them (common/train/model_graph.h):
// a stage that overrides an op, or fills a fusion slot with a fused kernel, is measured with its
// own kernel, and nothing here changes. bench_stage.cu.in compiles this file once per stage.
// Usage and the meaning of every number: tests/bench/README.md, "The kernel benchmark".
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <type_traits>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/buffer.cuh"
#include "cuda/check.cuh"
#include "cuda/device.cuh"
#include "attention_variants.h"
#include "matmul_variants.h"
#include "rounds.h"
#include "row_variants.h"
#include "measure.cuh"
#include "model/config.h"
#include "model/params.h"
#include "train/op_cost.h"
#include "train/optimizer.h"
#include "train/policy.h"

namespace gpt::bench {

// ---- the command line -------------------------------------------------------------------------

struct KernelBenchOptions {
    std::vector<int> batches{8, 16};
    int seq = 1024;
    int warmup = 3;
    int iters = 20;
    int rounds = 1;   // interleaved rounds of every op, each row the median of its rounds
    std::string ops;  // a regular expression over "op pass"; empty: every row
    std::string json;  // empty: no JSON file
    bool attention_variants = false;  // also the benchmark-only variants of the stage's attention
    bool matmul_variants = false;     // also the hand-written kernel of the stage's matmul arithmetic
    bool row_variants = false;        // also the first versions of stage 00's LayerNorm, classifier
                                      // and GELU (its softmax's is an attention variant), and the
                                      // candidates for stage 04's fused classifier
};

inline std::string kernel_bench_usage(const std::string& program, const std::string& stage) {
    return "usage: " + program + " [options]\n\n"
           "Times every op of stage " + stage + ", forward and backward, at the shapes of GPT-2 124M\n"
           "(one layer's ops: C=768, 12 heads of 64, V=50257), and reads each against the ceiling that\n"
           "bounds it (copy bandwidth or bf16 GEMM throughput), measured on GPU 0 in the same run.\n"
           "See tests/bench/README.md, \"The kernel benchmark\".\n\n"
           "  --batch LIST   batch sizes, comma-separated [8,16]\n"
           "  --seq T        sequence length, 1 to 16384 [1024]; past GPT-2's 1024 positions the\n"
           "                 position table is made longer (for attention at long T)\n"
           "  --warmup N     untimed runs of each op before timing it, at least 1 [3]\n"
           "  --iters N      timed runs of each op; the median is reported [20]\n"
           "  --ops REGEX    only the rows whose \"op pass\" matches, ignoring case:\n"
           "                 'lm_head', '^Matmul ', 'backward', 'Classifier' [every row]\n"
           "  --json PATH    also write every number as JSON\n"
           "  --attention-variants yes|no\n"
           "                 also time the variants of the stage's attention that only the benchmark\n"
           "                 builds (stages 00-02: the softmax's first version, a thread per row,\n"
           "                 tests/bench/first_versions.cuh; stage 03 on: stage 03's kernels before\n"
           "                 FlashAttention-2's design, 16 rows per warp, FlashAttention-2's atomic dq,\n"
           "                 blocks of 128 keys or queries in the backward, the forward without tensor\n"
           "                 cores; tests/bench/attention_variants.cuh) [no]\n"
           "  --rounds N     time every op (and variant) of a batch size in N rounds, 1 to 50: each once\n"
           "                 a round, in a different order each round, so that no op is always timed\n"
           "                 after the same one; each row reports the median of its rounds (the JSON\n"
           "                 also each round's) [1]\n"
           "  --matmul-variants yes|no\n"
           "                 also time the hand-written kernel of the stage's matmul arithmetic, forward\n"
           "                 only, at the five matmul shapes (stage 01: its TF32 WMMA kernel,\n"
           "                 stages/01_tf32/tf32_wmma_matmul.cuh; other stages have none) [no]\n"
           "  --variants yes|no\n"
           "                 also time every variant of the stage's ops that only the benchmark builds:\n"
           "                 the two above, and the first versions of stage 00's kernels, one thread\n"
           "                 per row (LayerNorm, the causal softmax, the classifier; stages 00-03,\n"
           "                 where they still run stage 00's op) or per element (GELU, every stage;\n"
           "                 tests/bench/first_versions.cuh),\n"
           "                 and from stage 04 on the candidates for the fused classifier, its row held\n"
           "                 in registers (tests/bench/classifier_variants.cuh) [no]\n"
           "  --help         this text\n\n"
           "Exit status: 0 every row measured or skipped (a row that needs more device memory than\n"
           "is free is skipped, and says so), 1 an op failed or a CUDA error, 2 a bad option,\n"
           "3 no usable GPU (none, or one older than the stage needs).\n";
}

inline std::vector<int> parse_batch_list(const std::string& option, const std::string& value) {
    std::vector<int> batches;
    size_t start = 0;
    while (true) {
        const size_t comma = value.find(',', start);
        const std::string part = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        batches.push_back(static_cast<int>(parse_whole_number(option, part, 1, 1024)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return batches;
}

inline std::regex ops_regex(const std::string& pattern) {
    try {
        return std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& e) {
        throw UsageError("option --ops: '" + pattern + "' is not a regular expression (" + e.what() + ")");
    }
}

inline KernelBenchOptions parse_kernel_bench_options(int argc, char** argv, int max_seq, bool& help) {
    KernelBenchOptions o;
    for (const auto& [option, value] :
         option_pairs(argc, argv,
                      {"--batch", "--seq", "--warmup", "--iters", "--rounds", "--ops", "--json",
                       "--attention-variants", "--matmul-variants", "--variants"},
                      help)) {
        if (option == "--batch") o.batches = parse_batch_list(option, value);
        else if (option == "--seq") o.seq = static_cast<int>(parse_whole_number(option, value, 1, max_seq));
        else if (option == "--warmup") o.warmup = static_cast<int>(parse_whole_number(option, value, 1, 1000));
        else if (option == "--iters") o.iters = static_cast<int>(parse_whole_number(option, value, 1, 10000));
        else if (option == "--rounds") o.rounds = static_cast<int>(parse_whole_number(option, value, 1, 50));
        else if (option == "--attention-variants") {
            if (value != "yes" && value != "no")
                throw UsageError("option --attention-variants: '" + value + "' is not yes or no");
            o.attention_variants = value == "yes";
        } else if (option == "--matmul-variants") {
            if (value != "yes" && value != "no")
                throw UsageError("option --matmul-variants: '" + value + "' is not yes or no");
            o.matmul_variants = value == "yes";
        } else if (option == "--variants") {
            if (value != "yes" && value != "no") throw UsageError("option --variants: '" + value + "' is not yes or no");
            o.attention_variants = o.matmul_variants = o.row_variants = value == "yes";
        } else if (option == "--ops") {
            ops_regex(value);  // a bad pattern is a usage error now, not after the ceilings
            o.ops = value;
        } else {
            if (value.empty()) throw UsageError("option --json needs a path");
            o.json = value;
        }
    }
    return o;
}

// ---- what one row of the table holds ------------------------------------------------------------

struct Row {
    std::string op;      // the policy's name for it, and which of the model's matmuls: "Matmul qkv"
    std::string pass;    // "forward", "backward", "forward+backward" or "step"
    std::string shape;   // the sizes, named as in the op's signature
    std::string source;  // the file the op comes from (the policy's op table)
    int batch = 0, seq = 0;  // 0: the op does not depend on them (the optimizer)
    Cost cost;
    std::string status;  // "ok", "skipped" or "failed"
    std::string reason;  // why it was skipped or failed
    double ms_median = std::numeric_limits<double>::quiet_NaN();
    double ms_min = std::numeric_limits<double>::quiet_NaN();
    double ms_max = std::numeric_limits<double>::quiet_NaN();
    // A row timed in --rounds N rounds (N > 1): each round's median, of which
    // ms_median is the median; ms_min and ms_max are then over every run of every round.
    std::vector<double> rounds_ms;
    // The SM clock and throttle reasons during the row's last timed run, one reading per round.
    std::vector<GpuClock> clocks;
    // Device memory the op kept for itself (its `saved` and `scratch`) beyond its inputs and
    // outputs, when the row was measured: stage 02's attention saves B·NH·T² probabilities,
    // stage 03's a log-sum-exp per row.
    size_t workspace_bytes = 0;

    std::string name() const { return op + " " + pass; }  // what --ops matches
    const char* bound() const { return cost.matmul_like() ? "matmul" : "bandwidth"; }
    // The readings' range, "1980" or "1755-1980" ("-": none), and the reasons met in any of them.
    std::string clock_mhz() const {
        unsigned lo = ~0u, hi = 0;
        for (const GpuClock& c : clocks)
            if (c.read) lo = std::min(lo, c.sm_mhz), hi = std::max(hi, c.sm_mhz);
        if (hi == 0) return "-";
        return lo == hi ? std::to_string(hi) : std::to_string(lo) + "-" + std::to_string(hi);
    }
    uint64_t clock_reasons() const {
        uint64_t reasons = 0;
        for (const GpuClock& c : clocks) reasons |= c.reasons;
        return reasons;
    }
    double gb_per_s() const { return cost.bytes / (ms_median / 1e3) / 1e9; }
    double tflops() const {
        return cost.matmul_like() ? cost.flops / (ms_median / 1e3) / 1e12 : std::numeric_limits<double>::quiet_NaN();
    }
    // Of the ceiling that bounds the op: matrix products against the GEMM, the rest against the copy.
    double ceiling_fraction(const CopyCeiling& copy, const GemmCeiling& gemm) const {
        return cost.matmul_like() ? tflops() / gemm.tflops : gb_per_s() / copy.gb_per_s;
    }
};

// ---- the L2 cache, emptied before every timed run ---------------------------------------------

// Reads its buffer (twice the L2 size) so that the next op finds none of its own data in the L2
// cache and reads it from DRAM, as the copy ceiling does. Reading, not writing: written lines
// would sit dirty in L2 and be written back while the next op is being timed.
static __global__ void read_through_kernel(const uint4* p, size_t n, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc;  // hardly ever true: it only keeps the loads from being removed
}

class L2Flush {
  public:
    explicit L2Flush(cudaStream_t stream) : stream_(stream) {
        int l2_bytes = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0));
        n_ = 2 * size_t(l2_bytes) / sizeof(uint4);
        buffer_ = cuda::DeviceBuffer<uint4>(n_);
        sink_ = cuda::DeviceBuffer<unsigned>(1);
        CUDA_CHECK(cudaMemsetAsync(buffer_.data(), 1, n_ * sizeof(uint4), stream_));
    }
    void operator()() {
        if (n_ == 0) return;
        read_through_kernel<<<fill_blocks(n_), 256, 0, stream_>>>(buffer_.data(), n_, sink_.data());
        LAUNCH_CHECK();
    }

  private:
    cudaStream_t stream_;
    size_t n_ = 0;
    cuda::DeviceBuffer<uint4> buffer_;
    cuda::DeviceBuffer<unsigned> sink_;
};

// An op that cannot get the device memory it needs: its rows are skipped, the run goes on.
struct OutOfDeviceMemory : Error {
    using Error::Error;
};

inline std::string gib(double bytes) {
    char s[32];
    std::snprintf(s, sizeof(s), "%.2f GiB", bytes / 1073741824.0);
    return s;
}

inline std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char s[32];
    std::strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return s;
}

// ---- the benchmark ------------------------------------------------------------------------------

template <class S>
class KernelBench {
  public:
    using act_t = typename S::act_t;
    using O = Ops<S>;

    KernelBench(const KernelBenchOptions& options, const GPTConfig& config, std::string program, std::string command)
        : options_(options), filter_(ops_regex(options.ops)), program_(std::move(program)),
          command_(std::move(command)), C_(config.n_embd), NH_(config.n_head), V_(config.vocab_size),
          Vp_(config.padded_vocab(S::kVocabMultiple)), maxT_(config.max_seq_len), config_(config) {
        for (const OpRow& row : op_table<S>()) op_sources_.push_back(row);
    }

    // Lists the rows without touching the GPU: an --ops pattern that matches none of them is a
    // usage error, found before anything is measured.
    void plan() {
        planning_ = true;
        visit_all_ops();
        planning_ = false;
        if (planned_rows_ == 0) {
            std::string names;
            for (const std::string& op : planned_ops_) names += (names.empty() ? "" : ", ") + op;
            throw UsageError("option --ops: '" + options_.ops + "' matches no row; the ops are " + names +
                             ", each with its passes (forward, backward, forward+backward, step)");
        }
    }

    // Measures the ceilings, then every planned row, printing the table as it goes. Returns the
    // exit status: kExitError when an op failed.
    int run() {
        const auto start = std::chrono::steady_clock::now();
        ctx_ = std::make_unique<typename S::Context>(stage_tag<S>);
        // Weight gradients written, not added: a step of one micro-batch, whose backward writes
        // them (train/gpt.h, zero_grad). In a stage that times matmul algorithms (kTimeMatmuls),
        // their matmuls are then timed for the choice (common/cuda/gemm.cuh), as in the trainer.
        S::write_weight_gradients(ctx(), true);
        clocks_ = clock_reader();
        print_banner();
        measure_ceilings();
        flush_ = std::make_unique<L2Flush>(stream());
        print_header();
        try {
            visit_all_ops();
        } catch (const std::exception& e) {
            // Nothing more can be measured (the device is in an error state): keep what was.
            if (!options_.json.empty()) write_file("--json", options_.json, to_json(e.what()));
            throw;
        }
        print_matmul_algorithms();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        int counts[3] = {0, 0, 0};  // ok, skipped, failed
        for (const Row& row : rows_) ++counts[row.status == "ok" ? 0 : row.status == "skipped" ? 1 : 2];
        std::printf("\nrows          %d measured, %d skipped, %d failed, in %.0f s\n", counts[0], counts[1], counts[2],
                    seconds);
        if (!options_.json.empty()) {
            write_file("--json", options_.json, to_json(""));
            std::printf("json          %s\n", options_.json.c_str());
        }
        return counts[2] > 0 ? kExitError : kExitOk;
    }

  private:
    // One op at one batch size: its rows (one per pass), the device memory it holds while it is
    // measured, and the timing of each pass. Rows the --ops filter leaves out are not timed.
    class Case {
      public:
        Case(KernelBench& bench, const std::string& slot, const std::string& which, std::string shape, int batch,
             std::initializer_list<std::pair<const char*, Cost>> passes)
            : bench_(bench) {
            const std::string op = which.empty() ? slot : slot + " " + which;
            bench_.note_planned_op(op);
            for (const auto& [pass, pass_cost] : passes) {
                Row row;
                row.op = op;
                row.pass = pass;
                row.shape = shape;
                row.source = bench_.source_of(slot);
                row.batch = batch;
                row.seq = batch > 0 ? bench_.options_.seq : 0;
                row.cost = pass_cost;
                if (std::regex_search(row.name(), bench_.filter_)) rows_.push_back(row);
            }
            if (bench_.planning_) bench_.planned_rows_ += static_cast<int>(rows_.size());
        }
        // The file the op comes from, where it is not the policy's (a benchmark-only variant).
        void set_source(const std::string& source) {
            for (Row& row : rows_) row.source = source;
        }
        Case(const Case&) = delete;
        Case& operator=(const Case&) = delete;

        // Runs body(), which allocates the op's inputs and times its passes. Out of device memory:
        // the rows not yet measured are skipped. Another error that leaves the device usable (an
        // op that throws, a shape the library cannot do): they fail, and the run goes on.
        template <class Body>
        void run(Body&& body) {
            if (rows_.empty() || bench_.planning_) return;
            try {
                body();
            } catch (const OutOfDeviceMemory& e) {
                finish_unmeasured("skipped", e.what());
            } catch (const Error& e) {
                // An allocation inside an op (its own buffers, the optimizer's state) that failed.
                if (cudaGetLastError() == cudaErrorMemoryAllocation) {
                    finish_unmeasured("skipped", "out of device memory in the op's own allocations (" +
                                                     gib(double(free_device_bytes())) + " free, " +
                                                     gib(double(held_)) + " held for its inputs)");
                    return;
                }
                if (cudaDeviceSynchronize() != cudaSuccess) throw;  // the device is lost: stop
                finish_unmeasured("failed", e.what());
            }
        }

        // n activations (act_t) or fp32 numbers in device memory, random and never all zero:
        // offset + scale · r, r uniform in (-1, 1). Outputs too, so that an op that writes
        // nothing cannot leave zeros for the next one to read.
        act_t* acts(size_t n, float scale = 1.0f, float offset = 0.0f) { return random<act_t>(n, scale, offset); }
        float* floats(size_t n, float scale = 1.0f, float offset = 0.0f) { return random<float>(n, scale, offset); }
        int* tokens(size_t n) {
            int* p = static_cast<int*>(allocate(n * sizeof(int)));
            fill_tokens(p, n, bench_.next_seed_++, bench_.V_, bench_.stream());
            return p;
        }
        // Memory an op keeps for itself (`saved`, `scratch`): it writes before it reads.
        void* workspace(size_t bytes) {
            workspace_ += bytes;
            return allocate(bytes);
        }

        // Times one pass, if the filter wants it: the median of --iters runs after --warmup runs,
        // each run preceded by before_each() (untimed) and by emptying the L2 cache. Returns
        // whether it ran.
        template <class Op, class Before>
        bool time(const char* pass, Op&& op, Before&& before_each) {
            Row* row = find(pass);
            if (!row) return false;
            const int runs = bench_.options_.warmup + bench_.options_.iters;
            int run = 0;
            GpuClock clock;
            const std::vector<float> ms =
                time_runs(bench_.stream(), bench_.options_.warmup, bench_.options_.iters, op, [&] {
                    before_each();
                    (*bench_.flush_)();
                    // Read once the last run's flush is queued, so the GPU is busy: read after
                    // the run, NVML would already see it idle.
                    if (++run == runs) clock = bench_.clocks_->read();
                });
            row->clocks = {clock};
            row->ms_median = median(ms);
            row->ms_min = *std::min_element(ms.begin(), ms.end());
            row->ms_max = *std::max_element(ms.begin(), ms.end());
            finish(*row, "ok", "");
            return true;
        }
        template <class Op>
        bool time(const char* pass, Op&& op) {
            return time(pass, op, [] {});
        }
        // A forward pass whose results the backward reads: timed if wanted, else run once.
        template <class Op>
        void time_or_run_once(const char* pass, Op&& op) {
            if (!time(pass, op)) op();
        }

      private:
        template <class T>
        T* random(size_t n, float scale, float offset) {
            T* p = static_cast<T*>(allocate(n * sizeof(T)));
            fill_random(p, n, bench_.next_seed_++, bench_.stream(), scale, offset);
            return p;
        }
        static size_t free_device_bytes() {
            size_t free_bytes = 0, total_bytes = 0;
            CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
            return free_bytes;
        }
        void* allocate(size_t bytes) {
            const size_t free_bytes = free_device_bytes();
            const std::string why = "out of device memory: the op needs another " + gib(double(bytes)) + ", " +
                                    gib(double(free_bytes)) + " is free (it holds " + gib(double(held_)) + " already)";
            if (bytes > free_bytes) throw OutOfDeviceMemory(why);
            try {
                buffers_.emplace_back(bytes);
            } catch (const Error&) {
                if (cudaGetLastError() == cudaErrorMemoryAllocation) throw OutOfDeviceMemory(why);
                throw;
            }
            held_ += bytes;
            return buffers_.back().data();
        }
        Row* find(const std::string& pass) {
            for (Row& row : rows_)
                if (row.pass == pass && row.status.empty()) return &row;
            return nullptr;
        }
        void finish(Row& row, const char* status, const std::string& reason) {
            row.status = status;
            row.reason = reason;
            row.workspace_bytes = workspace_;
            bench_.report(row);
        }
        void finish_unmeasured(const char* status, const std::string& reason) {
            for (Row& row : rows_)
                if (row.status.empty()) finish(row, status, reason);
        }

        KernelBench& bench_;
        std::vector<Row> rows_;  // the rows the filter wants
        std::vector<cuda::DeviceBuffer<unsigned char>> buffers_;
        size_t held_ = 0;
        size_t workspace_ = 0;  // of held_, what workspace() gave
    };

    // ---- the ops, in the order of the policy's op table ----

    void visit_all_ops() {
        const int C = C_;
        for (int B : options_.batches) {
            const size_t rows_before = rows_.size();
            // One entry per op (per variant, for the attention), each timed in --rounds rounds.
            std::vector<std::function<void()>> ops{
                [this, B] { embedding(B); },
                [this, B] { layernorm(B); },
                // The model's five matmuls: C -> 3C, C -> C, C -> 4C, 4C -> C, and the tied LM head.
                [this, B, C] { matmul(B, "qkv", C, 3 * C, true); },
                [this, B, C] { matmul(B, "attn_proj", C, C, true); },
                [this, B, C] { matmul(B, "fc", C, 4 * C, true); },
                [this, B, C] { matmul(B, "fc_proj", 4 * C, C, true); },
                [this, B, C] { matmul(B, "lm_head", C, Vp_, false); },
            };
            if (options_.matmul_variants) ops.push_back([this, B] { hand_written_matmuls(B); });
            attention(B, ops);
            for (auto op : {&KernelBench::gelu, &KernelBench::residual, &KernelBench::classifier,
                            &KernelBench::matmul_bias_gelu, &KernelBench::matmul_backward_gelu,
                            &KernelBench::residual_layernorm})
                ops.push_back([this, B, op] { (this->*op)(B); });
            classifier_with_grad(B, ops);
            if constexpr (S::kVocabMultiple > 1) lm_head_paddings(B, ops);
            in_rounds(ops, "B=" + std::to_string(B));
            if (rows_.size() > rows_before) std::printf("\n");  // a blank line after each batch size
        }
        in_rounds({[this] { optimizer(); }}, "the optimizer");
    }

    OpSizes sizes(int B) const { return op_sizes(config_, Vp_, B, options_.seq, sizeof(act_t)); }
    std::string rows_shape(int N, int C) const { return "N=" + std::to_string(N) + " C=" + std::to_string(C); }

    void embedding(int B) {
        const int T = options_.seq, C = C_, N = B * T;
        const OpSizes s = sizes(B);
        Case c(*this, "Embedding", "", "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C),
               B, {{"forward", cost::embedding_forward(s)}, {"backward", cost::embedding_backward(s)}});
        c.run([&] {
            const int* tokens = c.tokens(N);
            const act_t* wte = c.acts(size_t(Vp_) * C, 0.1f);
            const int positions = std::max(maxT_, T);  // --seq may be longer than GPT-2's context
            const act_t* wpe = c.acts(size_t(positions) * C, 0.1f);
            act_t* out = c.acts(size_t(N) * C);
            c.time("forward", [&] { O::Embedding::forward(ctx(), out, tokens, wte, wpe, B, T, C); });
            const act_t* dout = c.acts(size_t(N) * C);
            float* dwte = c.floats(size_t(Vp_) * C, 0.01f);  // added to (the embedding's backward)
            float* dwpe = c.floats(size_t(positions) * C, 0.01f);
            c.time("backward", [&] { O::Embedding::backward(ctx(), dwte, dwpe, dout, tokens, B, T, C); });
        });
    }

    // Calls run(op, which) with the stage's Op (which: "") and, with --variants yes, with each of
    // its benchmark-only variants in Variants<Op> (row_variants.h; which: the variant's label).
    template <template <class> class Variants, class Op, class Run>
    void with_row_variants(Run&& run) {
        run(Op{}, "");
        if (options_.row_variants)
            std::apply([&](auto... variant) { (run(variant, variant.label), ...); }, typename Variants<Op>::type{});
    }

    void layernorm(int B) {
        with_row_variants<LayerNormVariants, typename O::LayerNorm>(
            [&](auto op, const char* which) { layernorm_op<decltype(op)>(B, which); });
    }

    // The stage's LayerNorm, or one of its benchmark-only variants (`which` names it).
    template <class L>
    void layernorm_op(int B, const char* which) {
        const int C = C_, N = B * options_.seq;
        const size_t NC = size_t(N) * C;
        const OpSizes s = sizes(B);
        Case c(*this, "LayerNorm", which, rows_shape(N, C), B,
               {{"forward", cost::layernorm_forward(s)}, {"backward", cost::layernorm_backward(s)}});
        if (*which) c.set_source(detail::where<L>());
        c.run([&] {
            const act_t* inp = c.acts(NC, 2.0f);
            const act_t* weight = c.acts(C, 0.1f, 1.0f);  // near 1, as trained gains are
            const act_t* bias = c.acts(C, 0.1f);
            act_t* out = c.acts(NC);
            float* mean = c.floats(N);
            float* rstd = c.floats(N);
            // The backward reads the statistics this forward saves.
            c.time_or_run_once("forward",
                               [&] { L::forward(ctx(), out, mean, rstd, inp, weight, bias, N, C); });
            const act_t* dout = c.acts(NC);
            act_t* dinp = c.acts(NC);  // added to, as the residual stream's gradient
            float* dweight = c.floats(C);
            float* dbias = c.floats(C);
            c.time("backward", [&] {
                L::backward(ctx(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
            });
        });
    }

    // One of the model's linear layers: out[N, OC] = inp[N, C] · weight[OC, C]ᵀ (+ bias).
    void matmul(int B, const char* which, int C, int OC, bool with_bias) {
        const int N = B * options_.seq;
        const OpSizes s = sizes(B);
        Case c(*this, "Matmul", which, rows_shape(N, C) + " OC=" + std::to_string(OC), B,
               {{"forward", cost::matmul_forward(s, C, OC, with_bias)},
                {"backward", cost::matmul_backward(s, C, OC, with_bias)}});
        c.run([&] {
            const act_t* inp = c.acts(size_t(N) * C);
            const act_t* weight = c.acts(size_t(OC) * C, 0.05f);
            const act_t* bias = with_bias ? c.acts(OC, 0.05f) : nullptr;
            act_t* out = c.acts(size_t(N) * OC);
            c.time("forward", [&] { O::Matmul::forward(ctx(), out, inp, weight, bias, N, C, OC); });
            const act_t* dout = c.acts(size_t(N) * OC, 0.01f);
            act_t* dinp = c.acts(size_t(N) * C);
            float* dweight = c.floats(size_t(OC) * C, 0.01f);  // written (see run()), dbias added to
            float* dbias = with_bias ? c.floats(OC, 0.01f) : nullptr;
            c.time("backward",
                   [&] { O::Matmul::backward(ctx(), dinp, dweight, dbias, dout, inp, weight, N, C, OC); });
        });
    }

    // The hand-written kernel of the stage's matmul arithmetic, where it has one (matmul_variants.h:
    // stage 01's TF32 WMMA kernel), at the same five shapes as the Matmul rows above: forward only.
    void hand_written_matmuls(int B) {
        using HandWritten = typename HandWrittenMatmul<cuda::MatmulMath<S::kPrecision>>::type;
        if constexpr (!std::is_void_v<HandWritten>) {
            const int C = C_;
            hand_written_matmul<HandWritten>(B, "qkv", C, 3 * C, true);
            hand_written_matmul<HandWritten>(B, "attn_proj", C, C, true);
            hand_written_matmul<HandWritten>(B, "fc", C, 4 * C, true);
            hand_written_matmul<HandWritten>(B, "fc_proj", 4 * C, C, true);
            hand_written_matmul<HandWritten>(B, "lm_head", C, Vp_, false);
        }
    }
    template <class M>
    void hand_written_matmul(int B, const char* which, int C, int OC, bool with_bias) {
        const int N = B * options_.seq;
        const OpSizes s = sizes(B);
        Case c(*this, "Matmul", std::string(which) + " (" + M::label + ")",
               rows_shape(N, C) + " OC=" + std::to_string(OC), B,
               {{"forward", cost::matmul_forward(s, C, OC, with_bias)}});
        c.set_source(detail::where<M>());
        c.run([&] {
            const act_t* inp = c.acts(size_t(N) * C);
            const act_t* weight = c.acts(size_t(OC) * C, 0.05f);
            const act_t* bias = with_bias ? c.acts(OC, 0.05f) : nullptr;
            act_t* out = c.acts(size_t(N) * OC);
            c.time("forward", [&] { M::forward(ctx(), out, inp, weight, bias, N, C, OC); });
        });
    }

    // Stage 05's question: the LM head's matmuls at the vocabulary as it is (50257) and padded to
    // multiples of 8 (50264: rows of 16 bytes in bf16, the alignment cuBLASLt asks for), 16 or 32
    // (50272), 64 or 128 (50304), 256 and 1024, with the stage's own Matmul: how much of padding's
    // gain is alignment alone, and how much the tile multiples. A width is measured once however
    // many multiples give it; an entry each.
    void lm_head_paddings(int B, std::vector<std::function<void()>>& ops) {
        std::vector<int> widths;
        for (const int multiple : {1, 8, 16, 32, 64, 128, 256, 1024}) {
            const int width = config_.padded_vocab(multiple);
            if (std::find(widths.begin(), widths.end(), width) == widths.end()) widths.push_back(width);
        }
        for (const int width : widths)
            ops.push_back([this, B, width] {
                matmul(B, ("lm_head at " + std::to_string(width)).c_str(), C_, width, false);
            });
    }

    // The stage's attention, then each variant: an entry each, so that the rounds interleave them.
    void attention(int B, std::vector<std::function<void()>>& ops) {
        ops.push_back([this, B] { attention_op<typename O::Attention>(B, ""); });
        if (options_.attention_variants)
            std::apply(
                [&](auto... variant) {
                    (ops.push_back([this, B, variant] { attention_op<decltype(variant)>(B, variant.label); }), ...);
                },
                typename AttentionVariants<typename O::Attention>::type{});
    }

    // Runs each entry (a function that makes its Case and times its passes) once in each of
    // --rounds rounds, each round in its own order (rounds.h). The rows are held until the last
    // round, then reported once each, in the entries' order, with the median of their rounds
    // (merge_rounds).
    void in_rounds(const std::vector<std::function<void()>>& entries, const std::string& what) {
        if (options_.rounds == 1 || planning_) {
            for (const auto& entry : entries) entry();
            return;
        }
        const size_t n = entries.size();
        std::vector<std::vector<Row>> held(n);  // each entry's rows, round after round
        std::printf("rounds of %s:", what.c_str());
        holding_ = true;
        for (size_t r = 0; r < size_t(options_.rounds); ++r) {
            for (const size_t i : round_order(r, n)) {
                entries[i]();
                held[i].insert(held[i].end(), held_.begin(), held_.end());
                held_.clear();
            }
            std::printf(" %zu", r + 1);  // progress: the table comes after the last round
            std::fflush(stdout);
        }
        holding_ = false;
        std::printf("\n");
        for (const std::vector<Row>& rows : held)
            for (size_t i = 0; i < rows.size(); ++i) {
                const auto same = [&](const Row& r) { return r.name() == rows[i].name(); };
                if (std::any_of(rows.begin(), rows.begin() + i, same)) continue;  // reported with its first round
                std::vector<Row> rounds;
                std::copy_if(rows.begin() + i, rows.end(), std::back_inserter(rounds), same);
                report(merge_rounds(rounds));
            }
    }

    // One row from its rounds: the median of the rounds' medians, the fastest and the slowest run
    // of them all. A round that was not measured (skipped, failed) makes the row what it was.
    static Row merge_rounds(const std::vector<Row>& rounds) {
        Row row = rounds.front();
        row.clocks.clear();
        for (const Row& r : rounds) {
            if (r.status != "ok") return r;
            row.rounds_ms.push_back(r.ms_median);
            row.clocks.insert(row.clocks.end(), r.clocks.begin(), r.clocks.end());
            row.ms_min = std::min(row.ms_min, r.ms_min);
            row.ms_max = std::max(row.ms_max, r.ms_max);
        }
        row.ms_median = median(std::vector<float>(row.rounds_ms.begin(), row.rounds_ms.end()));
        return row;
    }

    // The stage's attention, or one of its benchmark-only variants (`which` names it).
    template <class A>
    void attention_op(int B, const char* which) {
        const int T = options_.seq, C = C_, NH = NH_, N = B * T;
        const size_t NC = size_t(N) * C;
        const OpSizes s = sizes(B);
        Case c(*this, "Attention", which,
               "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                   " HS=" + std::to_string(C / NH),
               B, {{"forward", cost::attention_forward(s)}, {"backward", cost::attention_backward(s)}});
        if (*which) c.set_source(detail::where<A>());
        c.run([&] {
            const act_t* qkv = c.acts(3 * NC);
            act_t* out = c.acts(NC);
            void* saved = c.workspace(A::saved_bytes(B, T, C, NH, sizeof(act_t)));
            void* scratch = c.workspace(A::scratch_bytes(B, T, C, NH, sizeof(act_t)));
            // The backward reads what this forward saved.
            c.time_or_run_once("forward",
                               [&] { A::forward(ctx(), out, saved, qkv, B, T, C, NH, scratch); });
            const act_t* dout = c.acts(NC);
            act_t* dqkv = c.acts(3 * NC);
            c.time("backward", [&] {
                A::backward(ctx(), dqkv, dout, qkv, out, saved, B, T, C, NH, scratch);
            });
        });
    }

    void gelu(int B) {
        with_row_variants<GeluVariants, typename O::Gelu>(
            [&](auto op, const char* which) { gelu_op<decltype(op)>(B, which); });
    }

    // GELU of the MLP's hidden layer, N x 4C elements: the stage's, or one of its benchmark-only
    // variants (`which` names it).
    template <class G>
    void gelu_op(int B, const char* which) {
        const size_t n = size_t(B) * options_.seq * 4 * C_;
        const OpSizes s = sizes(B);
        Case c(*this, "Gelu", which, "n=" + std::to_string(n), B,
               {{"forward", cost::gelu_forward(s, double(n))}, {"backward", cost::gelu_backward(s, double(n))}});
        if (*which) c.set_source(detail::where<G>());
        c.run([&] {
            const act_t* inp = c.acts(n, 3.0f);  // both tails, where tanh saturates
            act_t* out = c.acts(n);
            c.time("forward", [&] { G::forward(ctx(), out, inp, n); });
            const act_t* dout = c.acts(n);
            act_t* dinp = c.acts(n);
            c.time("backward", [&] { G::backward(ctx(), dinp, inp, dout, n); });
        });
    }

    // The residual add has no backward: the graph passes the gradient to both inputs itself.
    void residual(int B) {
        const size_t n = size_t(B) * options_.seq * C_;
        Case c(*this, "Residual", "", "n=" + std::to_string(n), B,
               {{"forward", cost::residual_forward(sizes(B), double(n))}});
        c.run([&] {
            const act_t* a = c.acts(n);
            const act_t* b = c.acts(n, 0.3f);
            act_t* out = c.acts(n);
            c.time("forward", [&] { O::Residual::forward(ctx(), out, a, b, n); });
        });
    }

    std::string classifier_shape(int N) const {
        std::string shape = "N=" + std::to_string(N) + " V=" + std::to_string(V_);
        if (Vp_ != V_) shape += " Vp=" + std::to_string(Vp_);
        return shape;
    }

    void classifier(int B) {
        with_row_variants<ClassifierVariants, typename O::Classifier>(
            [&](auto op, const char* which) { classifier_op<decltype(op)>(B, which); });
    }

    // The stage's classifier, or one of its benchmark-only variants (`which` names it).
    template <class K>
    void classifier_op(int B, const char* which) {
        const int N = B * options_.seq;
        const float dloss = 1.0f / N;  // the gradient of the mean loss, as in the graph
        const OpSizes s = sizes(B);
        Case c(*this, "Classifier", which, classifier_shape(N), B,
               {{"forward", cost::classifier_forward(s)}, {"backward", cost::classifier_backward(s)}});
        if (*which) c.set_source(detail::where<K>());
        c.run([&] {
            act_t* logits = c.acts(size_t(N) * Vp_, 3.0f);
            const int* targets = c.tokens(N);
            float* losses = c.floats(N);
            void* saved = c.workspace(K::saved_bytes(N, Vp_, sizeof(act_t)));
            void* scratch = c.workspace(K::scratch_bytes(N, Vp_, sizeof(act_t)));
            c.time_or_run_once("forward", [&] {
                K::forward(ctx(), losses, saved, logits, targets, N, V_, Vp_, scratch);
            });
            // Written over the logits, as the graph does (a backward that reads the logits reads
            // the last run's gradients from the second run on: the same work).
            c.time("backward", [&] {
                K::backward(ctx(), logits, saved, logits, targets, dloss, N, V_, Vp_, scratch);
            });
        });
    }

    // The fusion slot of the MLP's first layer, C -> 4C: a fused kernel in stages that fill the
    // slot, Matmul then Gelu (common/train/compose.h) in those that do not.
    void matmul_bias_gelu(int B) {
        const int C = C_, OC = 4 * C_, N = B * options_.seq;
        const size_t NOC = size_t(N) * OC;
        const OpSizes s = sizes(B);
        Case c(*this, "MatmulBiasGelu", "fc", rows_shape(N, C) + " OC=" + std::to_string(OC), B,
               {{"forward", cost::matmul_bias_gelu_forward(s, C, OC)}});
        c.run([&] {
            const act_t* inp = c.acts(size_t(N) * C);
            const act_t* weight = c.acts(size_t(OC) * C, 0.05f);
            const act_t* bias = c.acts(OC, 0.05f);
            act_t* out = c.acts(NOC);
            act_t* pre = c.acts(NOC);
            c.time("forward", [&] { O::MatmulBiasGelu::forward(ctx(), out, pre, inp, weight, bias, N, C, OC); });
        });
    }

    // The fusion slot of the MLP's second layer's backward, 4C -> C, on through the GELU before
    // it: Matmul's backward then Gelu's in stages that do not fill the slot.
    void matmul_backward_gelu(int B) {
        const int C = 4 * C_, OC = C_, N = B * options_.seq;
        const OpSizes s = sizes(B);
        Case c(*this, "MatmulBackwardGelu", "fc_proj", rows_shape(N, C) + " OC=" + std::to_string(OC), B,
               {{"backward", cost::matmul_backward_gelu(s, C, OC)}});
        c.run([&] {
            const act_t* pre = c.acts(size_t(N) * C, 2.0f);  // both tails of the GELU
            const act_t* inp = c.acts(size_t(N) * C);        // gelu(pre) in the model: any values time the same
            const act_t* weight = c.acts(size_t(OC) * C, 0.05f);
            const act_t* dout = c.acts(size_t(N) * OC, 0.01f);
            act_t* dpre = c.acts(size_t(N) * C);
            float* dweight = c.floats(size_t(OC) * C, 0.01f);  // written (see run()), dbias added to
            float* dbias = c.floats(OC, 0.01f);
            c.time("backward", [&] {
                O::MatmulBackwardGelu::backward(ctx(), dpre, dweight, dbias, dout, inp, pre, weight, N, C, OC);
            });
        });
    }

    // The fusion slot of every residual add with the LayerNorm after it.
    void residual_layernorm(int B) {
        const int C = C_, N = B * options_.seq;
        const size_t NC = size_t(N) * C;
        const OpSizes s = sizes(B);
        Case c(*this, "ResidualLayerNorm", "", rows_shape(N, C), B,
               {{"forward", cost::residual_layernorm_forward(s)}, {"backward", cost::residual_layernorm_backward(s)}});
        c.run([&] {
            const act_t* a = c.acts(NC, 2.0f);  // the residual stream
            const act_t* b = c.acts(NC, 0.5f);  // what a branch adds to it
            const act_t* weight = c.acts(C, 0.1f, 1.0f);
            const act_t* bias = c.acts(C, 0.1f);
            act_t* residual = c.acts(NC);
            act_t* out = c.acts(NC);
            float* mean = c.floats(N);
            float* rstd = c.floats(N);
            c.time_or_run_once("forward", [&] {
                O::ResidualLayerNorm::forward(ctx(), residual, out, mean, rstd, a, b, weight, bias, N, C);
            });
            const act_t* dout = c.acts(NC);
            act_t* dresidual = c.acts(NC);  // added to
            float* dweight = c.floats(C);
            float* dbias = c.floats(C);
            c.time("backward", [&] {
                O::ResidualLayerNorm::backward(ctx(), dresidual, dweight, dbias, dout, residual, weight, mean, rstd,
                                               N, C);
            });
        });
    }

    // The fusion slot of the loss and the logits' gradient, in one call.
    // The slot, then each variant: an entry each, so that the rounds interleave them.
    void classifier_with_grad(int B, std::vector<std::function<void()>>& ops) {
        ops.push_back([this, B] { classifier_with_grad_op<typename O::ClassifierWithGrad>(B, ""); });
        if (options_.row_variants)
            std::apply(
                [&](auto... variant) {
                    (ops.push_back(
                         [this, B, variant] { classifier_with_grad_op<decltype(variant)>(B, variant.label); }),
                     ...);
                },
                typename ClassifierWithGradVariants<typename O::ClassifierWithGrad>::type{});
    }

    // The stage's ClassifierWithGrad slot, or one of its benchmark-only variants (`which` names it).
    template <class K>
    void classifier_with_grad_op(int B, const char* which) {
        const int N = B * options_.seq;
        const float dloss = 1.0f / N;
        Case c(*this, "ClassifierWithGrad", which, classifier_shape(N), B,
               {{"forward+backward", cost::classifier_with_grad(sizes(B))}});
        if (*which) c.set_source(detail::where<K>());
        c.run([&] {
            const act_t* logits = c.acts(size_t(N) * Vp_, 3.0f);
            const int* targets = c.tokens(N);
            float* losses = c.floats(N);
            // The graph writes dlogits over the logits; here into their own memory, so that every
            // run sees the same random logits.
            act_t* dlogits = c.acts(size_t(N) * Vp_);
            void* saved = c.workspace(K::saved_bytes(N, Vp_, sizeof(act_t)));
            void* scratch = c.workspace(K::scratch_bytes(N, Vp_, sizeof(act_t)));
            c.time("forward+backward", [&] {
                K::forward_backward(ctx(), losses, dlogits, logits, targets, dloss, N, V_, Vp_, saved, scratch);
            });
        });
    }

    // One optimizer step over every parameter of the model (the whole of GPT-2 124M, all layers):
    // the gradient norm, clipping and AdamW, as the trainer calls it.
    void optimizer() {
        const ParamLayout layout(config_, Vp_);
        const size_t P = layout.total();
        const bool act_copy = !std::is_same_v<act_t, float>;  // mixed precision keeps an act_t copy
        Case c(*this, "Optimizer", "", "P=" + std::to_string(P), 0,
               {{"step", cost::optimizer_step(double(P), sizeof(act_t), act_copy)}});
        c.run([&] {
            typename O::Optimizer optimizer(ctx(), layout);  // owns the weights and the moments
            fill_random(optimizer.master(), P, next_seed_++, stream(), 0.05f);
            fill_random(optimizer.m(), P, next_seed_++, stream(), 1e-4f);
            fill_random(optimizer.v(), P, next_seed_++, stream(), 1e-6f, 2e-6f);  // a second moment is positive
            optimizer.weights_changed(ctx());
            const float* grads = c.floats(P, 1e-3f);
            StepScalars* step = static_cast<StepScalars*>(c.workspace(sizeof(StepScalars)));
            const StepScalars scalars{6e-4f, 1};
            CUDA_CHECK(cudaMemcpy(step, &scalars, sizeof(scalars), cudaMemcpyHostToDevice));
            double* grad_sum_squares = static_cast<double*>(c.workspace(sizeof(double)));
            const AdamWSettings settings;  // the trainer's defaults: clipping at 1, weight decay 0.1
            c.time("step", [&] { optimizer.step(ctx(), grads, settings, step, grad_sum_squares); });
        });
    }

    // ---- output ----

    typename S::Context& ctx() { return *ctx_; }
    cudaStream_t stream() { return ctx_->stream; }

    std::string source_of(const std::string& slot) const {
        for (const OpRow& row : op_sources_)
            if (row.name == slot) return row.where;
        return "";
    }
    void note_planned_op(const std::string& op) {
        if (!planning_) return;
        for (const std::string& known : planned_ops_)
            if (known == op) return;
        planned_ops_.push_back(op);
    }

    void print_banner() const {
        std::string batches, vocabulary = "V=" + std::to_string(V_);
        for (int B : options_.batches) batches += (batches.empty() ? "" : ",") + std::to_string(B);
        if (Vp_ != V_) vocabulary += " (padded to " + std::to_string(Vp_) + ")";
        std::printf("%-13s kernel benchmark of stage %s: %s\n", program_.c_str(), S::name, S::description);
        std::printf("device        %s\n", cuda::device_description().c_str());
        std::printf("workload      GPT-2 124M: one layer's ops at C=%d NH=%d HS=%d %s, T=%d, B=%s; the optimizer "
                    "step over all parameters\n",
                    C_, NH_, C_ / NH_, vocabulary.c_str(), options_.seq, batches.c_str());
        std::printf("timing        median of %d runs after %d warm-up runs (CUDA events), L2 cache emptied before "
                    "each run\n",
                    options_.iters, options_.warmup);
        if (options_.rounds > 1)
            std::printf("rounds        %d interleaved rounds of every op, in a different order each round; each row "
                        "the median of its rounds' medians\n",
                        options_.rounds);
        if (clocks_->available())
            std::printf("clock         SM clock and throttle reasons (NVML) during each row's last timed run (SM MHz: "
                        "the range over its rounds)\n");
        else
            std::printf("clock         not read: %s\n", clocks_->why_unavailable().c_str());
        std::printf("FLOPs         of the matrix products, 2 per multiply-add; attention's over the causal half "
                    "(forward 4*B*NH*T^2*HS/2, backward 2.5x that, as FlashAttention counts)\n");
        if (!options_.ops.empty()) std::printf("rows          those matching '%s'\n", options_.ops.c_str());
        std::printf("%s", describe_policy<S>().c_str());
        std::fflush(stdout);
    }

    void measure_ceilings() {
        copy_ = measure_copy(kCopyMiB << 20, kCeilingWarmup, kCeilingIters, stream());
        copy_clock_ = clocks_->read();
        std::printf("bandwidth     %s\n", describe(copy_, kCeilingIters).c_str());
        if (copy_clock_.read) std::printf("  clock       %s\n", describe(copy_clock_, *clocks_).c_str());
        std::fflush(stdout);
        gemm_ = measure_gemm(kGemmSize, kCeilingWarmup, kCeilingIters, stream());
        gemm_clock_ = clocks_->read();
        std::printf("matmul        %s\n", describe(gemm_, kCeilingIters).c_str());
        if (gemm_clock_.read) std::printf("  clock       %s\n", describe(gemm_clock_, *clocks_).c_str());
        std::printf("\n");
        std::fflush(stdout);
    }

    static constexpr const char* kRowFormat = "%-18s %-16s %3s  %-24s %9s %8s %8s  %-9s %10s %9s%s\n";

    void print_header() const {
        std::printf(kRowFormat, "op", "pass", "B", "shape", "ms", "GB/s", "TFLOP/s", "bound", "of ceiling", "SM MHz",
                    "");
        std::fflush(stdout);
    }

    // Prints the row (the progress of the run is the table itself) and keeps it for the JSON; a
    // row timed in rounds is held until the last round (in_rounds).
    void report(const Row& row) {
        if (holding_) {
            held_.push_back(row);
            return;
        }
        const std::string batch = row.batch > 0 ? std::to_string(row.batch) : "-";
        if (row.status == "ok") {
            char ms[32], gbs[32], tflops[32], fraction[32];
            std::snprintf(ms, sizeof(ms), "%.4f", row.ms_median);
            std::snprintf(gbs, sizeof(gbs), "%.0f", row.gb_per_s());
            if (row.cost.matmul_like()) std::snprintf(tflops, sizeof(tflops), "%.1f", row.tflops());
            else std::snprintf(tflops, sizeof(tflops), "-");
            std::snprintf(fraction, sizeof(fraction), "%.1f%%", 100.0 * row.ceiling_fraction(copy_, gemm_));
            std::string notes;  // after the columns: the rounds' range, the throttle reasons met
            if (!row.rounds_ms.empty()) {
                char rounds[96];
                std::snprintf(rounds, sizeof(rounds), "  median of %zu interleaved rounds, %.4f-%.4f",
                              row.rounds_ms.size(), *std::min_element(row.rounds_ms.begin(), row.rounds_ms.end()),
                              *std::max_element(row.rounds_ms.begin(), row.rounds_ms.end()));
                notes += rounds;
            }
            if (row.clock_reasons()) notes += "  throttled: " + clock_reason_names(row.clock_reasons());
            std::printf(kRowFormat, row.op.c_str(), row.pass.c_str(), batch.c_str(), row.shape.c_str(), ms, gbs,
                        tflops, row.bound(), fraction, row.clock_mhz().c_str(), notes.c_str());
        } else {
            std::printf("%-18s %-16s %3s  %-24s %s: %s\n", row.op.c_str(), row.pass.c_str(), batch.c_str(),
                        row.shape.c_str(), row.status.c_str(), row.reason.c_str());
        }
        std::fflush(stdout);
        rows_.push_back(row);
    }

    // What the matmul library chose for each shape the ops met (common/cuda/gemm.cuh): the
    // heuristic's first algorithm and the fastest of its candidates, as timed when the shape was
    // first met (a few runs, the L2 cache not emptied: a rougher figure than the table's).
    void print_matmul_algorithms() {
        const auto choices = ctx().gemm.choices();
        if (!choices.empty()) {
            std::printf("\nmatmul algorithms, per shape (M x N x K): the heuristic's first choice and the fastest "
                        "of its candidates,\ntimed when the shape was first met (%d runs each)\n",
                        cuda::GemmContext::kTimedRuns);
            std::printf("%-52s %6s %9s %8s %9s %8s %6s\n", "shape", "tried", "first ms", "TFLOP/s", "chosen ms",
                        "TFLOP/s", "rank");
            for (const auto& c : choices) {
                const auto& a = c.algorithm;
                if (a.timed == 0) {
                    std::printf("%-52s %6d  the heuristic's first, of %d (%s)\n", c.shape.c_str(), 0, a.candidates,
                                !ctx().gemm.times_candidates() ? "kTimeMatmuls off: the stage times nothing"
                                : a.padded                     ? "padded copies"
                                : a.unsupported                ? "epilogue unsupported: separate kernels"
                                : a.candidates <= 1
                                    ? "the only candidate"
                                    : "first met adding to C, writing what it reads, or while recording: not timed");
                    continue;
                }
                char first_ms[32] = "-", first_tflops[32] = "-";  // the first choice may have refused to run
                if (a.ms_first > 0) {
                    std::snprintf(first_ms, sizeof(first_ms), "%.4f", a.ms_first);
                    std::snprintf(first_tflops, sizeof(first_tflops), "%.1f", c.flops / (a.ms_first * 1e9));
                }
                std::printf("%-52s %6d %9s %8s %9.4f %8.1f %6d\n", c.shape.c_str(), a.timed, first_ms, first_tflops,
                            a.ms_chosen, c.flops / (a.ms_chosen * 1e9), a.chosen);
            }
        }
        // Stage 04's epilogues against the plain product and a separate kernel (GemmContext::faster_of).
        const auto& ways = ctx().gemm.way_choices();
        if (!ways.empty()) {
            std::printf("\nepilogue or separate kernel, timed when first met (ms; -: cuBLASLt has no such epilogue)\n");
            std::printf("%-60s %9s %9s  %s\n", "op and shape", "epilogue", "separate", "kept");
            for (const auto& w : ways) {
                char fused[32] = "-", separate[32] = "-";
                if (w.ms[0] >= 0) std::snprintf(fused, sizeof(fused), "%.4f", w.ms[0]);
                if (w.ms[1] >= 0) std::snprintf(separate, sizeof(separate), "%.4f", w.ms[1]);
                std::printf("%-60s %9s %9s  %s\n", w.what.c_str(), fused, separate,
                            w.chosen == 0 ? "epilogue" : "separate");
            }
        }
        std::fflush(stdout);
    }

    // The values of the JSON's keys matmul_algorithms and epilogue_or_separate.
    std::string algorithm_choices_json() const {
        std::string j = "[";
        bool first = true;
        for (const auto& c : ctx_->gemm.choices()) {
            const auto& a = c.algorithm;
            j += first ? "\n    {" : ",\n    {";
            first = false;
            j += "\"shape\": " + Logger::json_string(c.shape) + ", \"flops\": " + json_number(c.flops, "%.0f");
            j += ", \"candidates\": " + std::to_string(a.candidates) + ", \"timed\": " + std::to_string(a.timed);
            j += ", \"chosen_rank\": " + std::to_string(a.chosen) + ", \"padded\": " + (a.padded ? "true" : "false");
            j += ", \"ms_first\": " + (a.ms_first > 0 ? json_number(a.ms_first) : std::string("null"));
            j += ", \"ms_chosen\": " + (a.ms_chosen > 0 ? json_number(a.ms_chosen) : std::string("null")) + "}";
        }
        j += first ? "]" : "\n  ]";
        j += ",\n  \"epilogue_or_separate\": [";
        first = true;
        for (const auto& w : ctx_->gemm.way_choices()) {
            j += first ? "\n    {" : ",\n    {";
            first = false;
            j += "\"what\": " + Logger::json_string(w.what);
            j += ", \"ms_epilogue\": " + (w.ms[0] >= 0 ? json_number(w.ms[0]) : std::string("null"));
            j += ", \"ms_separate\": " + (w.ms[1] >= 0 ? json_number(w.ms[1]) : std::string("null"));
            j += ", \"kept\": " + Logger::json_string(w.chosen == 0 ? "epilogue" : "separate") + "}";
        }
        return j + (first ? "]" : "\n  ]");
    }

    // A row's readings: null if none was made; else their range, the reasons met, each reading.
    static std::string clock_json(const Row& r) {
        std::string readings;
        unsigned lo = ~0u, hi = 0;
        for (const GpuClock& c : r.clocks) {
            if (!c.read) continue;
            lo = std::min(lo, c.sm_mhz);
            hi = std::max(hi, c.sm_mhz);
            readings += (readings.empty() ? "" : ", ") + bench::to_json(c);
        }
        if (readings.empty()) return "null";
        char mask[32];
        std::snprintf(mask, sizeof(mask), "\"0x%llx\"", static_cast<unsigned long long>(r.clock_reasons()));
        return "{\"sm_mhz_min\": " + std::to_string(lo) + ", \"sm_mhz_max\": " + std::to_string(hi) +
               ", \"throttle_reasons\": " + mask +
               ", \"throttle\": " + Logger::json_string(clock_reason_names(r.clock_reasons())) +
               ", \"readings\": [" + readings + "]}";
    }

    std::string to_json(const std::string& error) const {
        std::string batches;
        for (int B : options_.batches) batches += (batches.empty() ? "" : ", ") + std::to_string(B);
        std::string j = "{\n";
        j += "  \"program\": " + Logger::json_string(program_) + ",\n";
        j += "  \"stage\": " + Logger::json_string(S::name) + ",\n";
        j += "  \"stage_description\": " + Logger::json_string(S::description) + ",\n";
        j += "  \"act_t\": " + Logger::json_string(act_type_name<act_t>()) + ",\n";
        j += "  \"precision\": " + Logger::json_string(precision_name(S::kPrecision)) + ",\n";
        j += "  \"device_name\": " + Logger::json_string(cuda::device_name()) + ",\n";
        j += "  \"device\": " + Logger::json_string(cuda::device_description()) + ",\n";
        j += "  \"date\": " + Logger::json_string(utc_now()) + ",\n";
        j += "  \"command\": " + Logger::json_string(command_) + ",\n";
        j += "  \"error\": " + (error.empty() ? std::string("null") : Logger::json_string(error)) + ",\n";
        j += "  \"model\": {\"C\": " + std::to_string(C_) + ", \"NH\": " + std::to_string(NH_) +
             ", \"HS\": " + std::to_string(C_ / NH_) + ", \"V\": " + std::to_string(V_) +
             ", \"Vp\": " + std::to_string(Vp_) + ", \"maxT\": " + std::to_string(maxT_) + "},\n";
        j += "  \"settings\": {\"batch\": [" + batches + "], \"seq\": " + std::to_string(options_.seq) +
             ", \"warmup\": " + std::to_string(options_.warmup) + ", \"iters\": " + std::to_string(options_.iters) +
             ", \"ops\": " + (options_.ops.empty() ? std::string("null") : Logger::json_string(options_.ops)) +
             ", \"rounds\": " + std::to_string(options_.rounds) +
             ", \"l2_emptied_before_each_run\": true, \"attention_flops\": \"causal_half\"},\n";
        j += "  \"ceilings\": {\"iters\": " + std::to_string(kCeilingIters) +
             ", \"warmup\": " + std::to_string(kCeilingWarmup) + ", \"warmup_ms\": " + json_number(kCeilingWarmupMs) +
             ",\n    \"copy\": " + bench::to_json(copy_) + ",\n    \"gemm\": " + bench::to_json(gemm_) +
             ",\n    \"clock\": {\"copy\": " + bench::to_json(copy_clock_) + ", \"gemm\": " +
             bench::to_json(gemm_clock_) + "}},\n";
        j += "  \"clock\": " +
             (clocks_ && clocks_->available()
                  ? std::string("\"NVML, during each row's last timed run\"")
                  : "null, \"clock_unavailable\": " +
                        Logger::json_string(clocks_ ? clocks_->why_unavailable() : "the GPU was not used")) +
             ",\n";
        if (ctx_) j += "  \"matmul_algorithms\": " + algorithm_choices_json() + ",\n";
        j += "  \"rows\": [";
        for (size_t i = 0; i < rows_.size(); ++i) {
            const Row& r = rows_[i];
            j += i ? ",\n    {" : "\n    {";
            j += "\"op\": " + Logger::json_string(r.op) + ", \"pass\": " + Logger::json_string(r.pass);
            j += ", \"batch\": " + (r.batch > 0 ? std::to_string(r.batch) : std::string("null"));
            j += ", \"seq\": " + (r.seq > 0 ? std::to_string(r.seq) : std::string("null"));
            j += ", \"shape\": " + Logger::json_string(r.shape) + ", \"source\": " + Logger::json_string(r.source);
            j += ", \"status\": " + Logger::json_string(r.status);
            j += ", \"reason\": " + (r.reason.empty() ? std::string("null") : Logger::json_string(r.reason));
            j += ", \"bound\": " + Logger::json_string(r.bound());
            j += ", \"bytes\": " + json_number(r.cost.bytes, "%.0f");
            j += ", \"flops\": " + (r.cost.matmul_like() ? json_number(r.cost.flops, "%.0f") : std::string("null"));
            j += ", \"ms_median\": " + json_number(r.ms_median);
            j += ", \"ms_min\": " + json_number(r.ms_min);
            j += ", \"ms_max\": " + json_number(r.ms_max);
            if (!r.rounds_ms.empty()) {  // timed in rounds (--rounds above 1)
                std::string rounds;
                for (double ms : r.rounds_ms) rounds += (rounds.empty() ? "" : ", ") + json_number(ms);
                j += ", \"rounds_ms\": [" + rounds + "]";
                j += ", \"rounds_ms_min\": " + json_number(*std::min_element(r.rounds_ms.begin(), r.rounds_ms.end()));
                j += ", \"rounds_ms_max\": " + json_number(*std::max_element(r.rounds_ms.begin(), r.rounds_ms.end()));
            }
            j += ", \"clock\": " + clock_json(r);
            // A row that was not measured has no time (NaN), so these come out as null.
            j += ", \"gb_per_s\": " + json_number(r.gb_per_s());
            j += ", \"tflops\": " + json_number(r.tflops());
            j += ", \"ceiling_fraction\": " + json_number(r.ceiling_fraction(copy_, gemm_));
            j += ", \"workspace_bytes\": " +
                 (r.status == "ok" ? std::to_string(r.workspace_bytes) : std::string("null"));
            j += "}";
        }
        j += rows_.empty() ? "]\n}\n" : "\n  ]\n}\n";
        return j;
    }

    const KernelBenchOptions options_;
    const std::regex filter_;
    const std::string program_, command_;
    const int C_, NH_, V_, Vp_, maxT_;
    const GPTConfig config_;
    std::vector<OpRow> op_sources_;  // the policy's op table: where each op comes from

    bool planning_ = false;
    int planned_rows_ = 0;
    std::vector<std::string> planned_ops_;

    std::unique_ptr<typename S::Context> ctx_;  // made in run(): plan() needs no GPU
    std::unique_ptr<L2Flush> flush_;
    CopyCeiling copy_;
    GemmCeiling gemm_;
    std::unique_ptr<GpuClockReader> clocks_;  // made in run()
    GpuClock copy_clock_, gemm_clock_;       // read right after each ceiling
    uint32_t next_seed_ = 1;  // every array gets its own random numbers
    std::vector<Row> rows_;   // measured, skipped or failed, in the order they ran
    bool holding_ = false;    // in in_rounds: rows go to held_, not to the table
    std::vector<Row> held_;
};

// Longest --seq: beyond the model's 1024 positions, for the attention at long T
// (tests/bench/attention.py); the embedding then reads a longer position table.
constexpr int kMaxBenchSeq = 16384;

// The whole program: bench_stage.cu.in calls this with the stage's policy.
template <class S>
int kernel_bench_main(int argc, char** argv, const char* program) {
    try {
        const GPTConfig config = config_by_name("d12");  // GPT-2 124M
        bool help = false;
        const KernelBenchOptions options = parse_kernel_bench_options(argc, argv, kMaxBenchSeq, help);
        if (help) {
            std::printf("%s", kernel_bench_usage(program, S::name).c_str());
            return kExitOk;
        }
        std::string command = program;
        for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
        KernelBench<S> bench(options, config, program, command);
        bench.plan();
        if (!options.json.empty()) check_writable("--json", options.json);
        require_gpu(stage_gpu_need<S>());
        return bench.run();
    } catch (const std::exception& e) {
        return fail(program, e);
    }
}

}  // namespace gpt::bench
