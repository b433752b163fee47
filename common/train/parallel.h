// The `Parallel` piece of a stage policy: the processes training together, and what the model
// graph asks of them. One process by default (SingleProcess, below); the CPU reference runs
// several over TCP (common/dist/host_parallel.h), stage 06 over NCCL
// (stages/06_multi_gpu_mfu/nccl_data_parallel.cuh). The training loop and the data loader take
// rank and world from it; the model (GPT, train/gpt.h) calls, in one step:
//
//   backward of the last micro-batch   gradients_ready(bucket) as each block's gradients are
//                                      final: an all-reduce can start while backward goes on
//   update                             reduce_gradients(): all of them summed over processes
//                                      (ZeRO-1: each process gets the sum of its shard only);
//                                      with a sharded optimizer, the norm's sum of squares
//                                      (all_reduce_sum) and the updated weights (all_gather)
//   sync                               the loss (all_reduce_sum)
//
// and the training loop (train/loop.h) says when each step starts (starting) and reports its own
// failure (fail), so that a watchdog can stop every process when one of them fails.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"

namespace gpt {

// How the processes share the work (--zero).
struct ParallelSettings {
    int zero_stage = 0;  // 0: every process keeps the whole optimizer state; 1: ZeRO-1, sharded
    // The trainer's processes run a watchdog (dist/watchdog.h): when one fails, the others stop
    // within seconds. Tests that run ranks as threads of one process go without.
    bool watchdog = false;
    double step_timeout_s = 0;  // with the watchdog: the longest one step may take (0: no limit)
};

// The part of the flat parameter array whose optimizer state one process keeps (ZeRO-1). The
// array is cut into `world` pieces of `stride` elements; the last pieces may run past the end
// (then `count` is less than `stride`, possibly 0). Arrays that are gathered in place (weights,
// gradients) get `padded` elements, so that every process's piece exists.
struct Shard {
    size_t begin = 0, count = 0, stride = 0, padded = 0;
    size_t end() const { return begin + count; }
};

inline Shard shard_of(size_t total, int rank, int world) {
    Shard s;
    s.stride = (total + world - 1) / world;
    s.padded = s.stride * world;
    s.begin = std::min(total, s.stride * rank);
    s.count = std::min(total, s.begin + s.stride) - s.begin;
    return s;
}
inline Shard whole(size_t total) { return Shard{0, total, total, total}; }

// A set of gradient pieces (offset, count in the flat array) that become final together.
struct Bucket {
    std::vector<std::pair<size_t, size_t>> pieces;
};

// The order in which backward finishes the gradients: block L-1's slice of each per-layer
// tensor first, block 0's last, then the rest (wte, which the embedding's backward adds to last,
// wpe and ln_f). Bucket i of the result is the i-th to become final; together they cover the
// layout exactly once.
inline std::vector<Bucket> gradient_buckets(const ParamLayout& layout, int n_layer) {
    std::vector<Bucket> buckets(n_layer + 1);
    for (int l = n_layer - 1; l >= 0; --l)
        for (int t = kLn1W; t <= kFcProjB; ++t) {
            const size_t per_layer = layout.size[t] / n_layer;
            buckets[n_layer - 1 - l].pieces.emplace_back(layout.offset[t] + per_layer * l, per_layer);
        }
    for (int t : {kWte, kWpe, kLnfW, kLnfB}) buckets[n_layer].pieces.emplace_back(layout.offset[t], layout.size[t]);
    return buckets;
}

struct SingleProcess {
    static constexpr const char* source = __FILE__;

    SingleProcess() = default;
    explicit SingleProcess(const ParallelSettings&) {}

    int rank() const { return 0; }
    int world() const { return 1; }
    std::string describe() const { return "one process"; }
    // The optimizer state this process keeps: all of it.
    Shard shard(size_t total) const { return whole(total); }
    bool shards_optimizer() const { return false; }

    // Sums n values over all processes, in place, on the device's timeline (the loss of a step;
    // a sharded optimizer's sum of squares). With one process the sum is the value itself.
    template <class Context, class T>
    void all_reduce_sum(Context&, T*, size_t) {}
    template <class Context>
    void gradients_ready(Context&, float*, const Bucket&) {}
    // `in_buckets`: every bucket was handed to gradients_ready() since the last call.
    template <class Context>
    void reduce_gradients(Context&, float*, const Shard&, bool /*in_buckets*/) {}
    // Every process's piece of `data` (Shard) to every process, in place.
    template <class Context, class T>
    void all_gather(Context&, T*, const Shard&) {}
    // One value from every process, in rank order (a check that they agree).
    std::vector<uint64_t> gather_values(uint64_t v) { return {v}; }

    // This process starts `what` ("step 12"): the time limit of the watchdog, if any, counts from
    // now (ParallelSettings::step_timeout_s).
    void starting(const std::string&) {}
    // This process failed with `error`. With a watchdog (several processes, or stage 06):
    // prints it naming the rank, tells the others, stops the device's collectives and ends the
    // process with status 1, so that none of them waits for it. Alone: returns, and main()
    // prints the error as usual.
    void fail(const std::exception&) {}
    // Where a watchdog is ending this process because another failed, waits for the end: what
    // the device computed after the abort must not be used, nor saved. Alone: returns.
    void hold_if_stopping() {}
};

}  // namespace gpt
