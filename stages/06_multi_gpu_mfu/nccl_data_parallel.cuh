// Stage 06: data parallelism over NCCL, one process per GPU. Every process holds the whole
// model, reads its own windows of each step (data/loader.h), and the gradients are summed over
// processes before the optimizer steps, so that all of them take the same step:
//
//   --zero 0   all-reduce, block by block: as soon as the last micro-batch's backward has
//              finished a block's gradients (train/parallel.h, gradient_buckets), they are
//              summed on a second stream while backward goes on with the block below. Only the
//              last bucket (embeddings, ln_f) is summed after backward.
//   --zero 1   ZeRO-1: one reduce-scatter after backward gives each process the sum of its
//              1/N of the gradients; it keeps AdamW's moments for that shard only, updates its
//              shard of the weights, and an all-gather of the act_t weights gives every process
//              the whole model again. An all-reduce is a reduce-scatter and an all-gather of the
//              fp32 gradients; here the gather moves bf16 weights, so fewer bytes, but none of
//              them overlap backward. Memory: m and v (8 bytes per parameter) are spread over
//              the N processes; the fp32 master weights stay whole on each (gathered for
//              checkpoints), so this saves less than the ZeRO paper's 12 bytes per parameter.
//
// The processes meet through common/dist/group.h (MPI, a shared file or TCP), which also
// hands NCCL's unique id from rank 0 to the others. Everything here is queued on streams and
// may be captured in the step's CUDA Graph (NCCL operations can be).
// PyTorch equivalent: DistributedDataParallel (bucketed all-reduce overlapped with backward),
// and ZeroRedundancyOptimizer for --zero 1.
#pragma once
#include <cuda_bf16.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/backend.cuh"
#include "dist/group.h"
#include "train/parallel.h"
#include "util/error.h"

namespace gpt::stage06 {

#define NCCL_CHECK(call)                                                                              \
    do {                                                                                              \
        const ncclResult_t nccl_result_ = (call);                                                     \
        if (nccl_result_ != ncclSuccess)                                                              \
            throw ::gpt::Error(std::string("NCCL: ") + #call + ": " + ncclGetErrorString(nccl_result_)); \
    } while (0)

template <class T>
ncclDataType_t nccl_type();
template <>
inline ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
inline ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <>
inline ncclDataType_t nccl_type<__nv_bfloat16>() { return ncclBfloat16; }

class NcclDataParallel {
  public:
    static constexpr const char* source = __FILE__;

    NcclDataParallel() : NcclDataParallel(ParallelSettings{}) {}
    explicit NcclDataParallel(const ParallelSettings& settings)
        : settings_(settings), group_(std::make_unique<dist::Group>(dist::launch_from_environment())) {
        const std::string who = "rank " + std::to_string(rank()) + " of " + std::to_string(world());
        // One GPU per process, before anything is allocated: the local rank picks it, unless the
        // launcher shows each process only its own (Slurm's --gpus-per-task=1, CUDA_VISIBLE_DEVICES).
        const int devices = cuda::device_count();
        const int device = devices == 1 ? 0 : group_->local_rank();
        if (device >= devices)
            throw Error(who + ": local rank " + std::to_string(group_->local_rank()) + ", but this process sees " +
                        std::to_string(devices) + " GPU(s): start at most one process per GPU");
        CUDA_CHECK(cudaSetDevice(device));
        ncclUniqueId id{};
        if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        group_->broadcast(&id, sizeof(id));
        const ncclResult_t started = ncclCommInitRank(&comm_, world(), id, rank());
        if (started != ncclSuccess)
            throw Error(who + ": NCCL could not start (" + ncclGetErrorString(started) + ": " +
                        ncclGetLastError(nullptr) + "); NCCL_DEBUG=INFO says more");
        CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
    }
    ~NcclDataParallel() {
        if (comm_) ncclCommDestroy(comm_);
        if (ready_) cudaEventDestroy(ready_);
        if (reduced_) cudaEventDestroy(reduced_);
        if (comm_stream_) cudaStreamDestroy(comm_stream_);
    }
    NcclDataParallel(const NcclDataParallel&) = delete;
    NcclDataParallel& operator=(const NcclDataParallel&) = delete;

    int rank() const { return group_->rank(); }
    int world() const { return group_->world(); }
    std::string describe() const {
        int version = 0;
        ncclGetVersion(&version);
        const std::string nccl = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100);
        if (world() == 1) return "one process (" + nccl + ")";
        return std::to_string(world()) + " processes over " + nccl + ", " + group_->how() +
               (shards_optimizer() ? ", ZeRO-1 (reduce-scatter, sharded AdamW, all-gather)"
                                   : ", gradients all-reduced per block during backward");
    }
    bool shards_optimizer() const { return settings_.zero_stage == 1 && world() > 1; }
    Shard shard(size_t total) const { return shards_optimizer() ? shard_of(total, rank(), world()) : whole(total); }

    template <class T>
    void all_reduce_sum(CudaBackend::Context& ctx, T* data, size_t n) {
        NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type<T>(), ncclSum, comm_, ctx.stream));
    }

    // A block's gradients are final: the second stream waits for that point of the main
    // stream's work and sums them, in one NCCL group, while the main stream goes on.
    void gradients_ready(CudaBackend::Context& ctx, float* grads, const Bucket& bucket) {
        if (shards_optimizer()) return;
        CUDA_CHECK(cudaEventRecord(ready_, ctx.stream));
        CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
        NCCL_CHECK(ncclGroupStart());
        for (const auto& [offset, count] : bucket.pieces)
            NCCL_CHECK(ncclAllReduce(grads + offset, grads + offset, count, ncclFloat32, ncclSum, comm_, comm_stream_));
        NCCL_CHECK(ncclGroupEnd());
    }

    void reduce_gradients(CudaBackend::Context& ctx, float* grads, const Shard& shard, bool in_buckets) {
        if (shards_optimizer()) {
            // In place: each process's piece of the result lands where its shard is.
            NCCL_CHECK(ncclReduceScatter(grads, grads + shard.begin, shard.stride, ncclFloat32, ncclSum, comm_,
                                         ctx.stream));
        } else if (in_buckets) {
            // The optimizer waits for the last bucket's sum.
            CUDA_CHECK(cudaEventRecord(reduced_, comm_stream_));
            CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, reduced_, 0));
        } else {
            all_reduce_sum(ctx, grads, shard.padded);
        }
    }

    template <class T>
    void all_gather(CudaBackend::Context& ctx, T* data, const Shard& shard) {
        NCCL_CHECK(ncclAllGather(data + shard.begin, data, shard.stride, nccl_type<T>(), comm_, ctx.stream));
    }

    std::vector<uint64_t> gather_values(uint64_t v) { return group_->gather_values(v); }

  private:
    ParallelSettings settings_;
    std::unique_ptr<dist::Group> group_;  // destroyed last: NCCL's communicator goes first
    ncclComm_t comm_ = nullptr;
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t ready_ = nullptr, reduced_ = nullptr;
};

}  // namespace gpt::stage06
