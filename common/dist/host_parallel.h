// Data parallelism on the CPU: the CPU reference trained by several processes, their gradients
// summed over TCP (dist/group.h). It is what stage 06 does over NCCL, with the same buckets and
// the same ZeRO-1 shards (train/parallel.h), so that the bookkeeping of several processes is
// tested where there is no GPU: N processes of batch B train as one process of batch N x B.
// Started without a launcher, it is one process and never opens a socket.
#pragma once
#include <memory>
#include <string>

#include "dist/group.h"
#include "dist/watchdog.h"
#include "train/parallel.h"

namespace gpt {

class HostDataParallel : public dist::Watched {
  public:
    static constexpr const char* source = __FILE__;

    HostDataParallel() : HostDataParallel(ParallelSettings{}) {}
    explicit HostDataParallel(const ParallelSettings& settings)
        : HostDataParallel(settings, dist::launch_from_environment()) {}
    // A given place in the run, whatever the environment says (tests run ranks as threads).
    HostDataParallel(const ParallelSettings& settings, const dist::Launch& launch)
        : settings_(settings), group_(std::make_unique<dist::Group>(launch)) {
        if (settings.watchdog && world() > 1) watch(*group_, settings.step_timeout_s);
    }
    ~HostDataParallel() { unwatch(); }  // before the group it watches
    HostDataParallel(const HostDataParallel&) = delete;
    HostDataParallel& operator=(const HostDataParallel&) = delete;

    int rank() const { return group_->rank(); }
    int world() const { return group_->world(); }
    std::string describe() const {
        if (world() == 1) return "one process";
        return std::to_string(world()) + " processes over TCP on " + std::to_string(group_->hosts()) +
               (group_->hosts() == 1 ? " host, " : " hosts, ") + group_->how() +
               (shards_optimizer() ? ", ZeRO-1 (optimizer state sharded)" : ", gradients all-reduced per block");
    }
    bool shards_optimizer() const { return settings_.zero_stage == 1 && world() > 1; }
    Shard shard(size_t total) const { return shards_optimizer() ? shard_of(total, rank(), world()) : whole(total); }

    template <class Context, class T>
    void all_reduce_sum(Context&, T* data, size_t n) {
        group_->all_reduce_sum(data, n);
    }
    // Without ZeRO, each bucket is summed as soon as it is final (on the CPU nothing runs
    // beside backward, but the buckets are the ones stage 06 overlaps).
    template <class Context>
    void gradients_ready(Context&, float* grads, const Bucket& bucket) {
        if (shards_optimizer()) return;
        for (const auto& [offset, count] : bucket.pieces) group_->all_reduce_sum(grads + offset, count);
    }
    // ZeRO-1 needs only its shard summed (a reduce-scatter); over TCP through rank 0 that costs
    // what summing everything costs.
    template <class Context>
    void reduce_gradients(Context&, float* grads, const Shard& shard, bool in_buckets) {
        if (shards_optimizer() || !in_buckets) group_->all_reduce_sum(grads, shard.padded);
    }
    template <class Context, class T>
    void all_gather(Context&, T* data, const Shard& shard) {
        group_->all_gather(data, shard.stride * sizeof(T));
    }
    std::vector<uint64_t> gather_values(uint64_t v) { return group_->gather_values(v); }

  private:
    ParallelSettings settings_;
    std::unique_ptr<dist::Group> group_;
};

}  // namespace gpt
