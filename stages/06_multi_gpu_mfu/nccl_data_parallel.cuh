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
// DataParallel is that bookkeeping, written against a communicator: NcclCommunicator here (the
// processes meet through common/dist/group.h, which hands NCCL's unique id from rank 0 to the
// others); the GPU tests run it with ranks that are threads sharing one GPU
// (tests/gpu/thread_communicator.cuh), since NCCL takes one GPU per rank. Everything is queued on
// streams and may be captured in the step's CUDA Graph (NCCL operations can be).
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

// The processes of the run, one GPU each, over NCCL. Collectives are queued on a stream; between
// group_start() and group_end() they go out as one.
class NcclCommunicator {
  public:
    NcclCommunicator() : group_(std::make_unique<dist::Group>(dist::launch_from_environment())) {
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
    }
    ~NcclCommunicator() {
        if (comm_) ncclCommDestroy(comm_);
    }
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int rank() const { return group_->rank(); }
    int world() const { return group_->world(); }
    std::string describe() const {
        int version = 0;
        ncclGetVersion(&version);
        const std::string nccl = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100);
        return world() == 1 ? "one process (" + nccl + ")"
                            : std::to_string(world()) + " processes over " + nccl + ", " + group_->how();
    }

    void group_start() { NCCL_CHECK(ncclGroupStart()); }
    void group_end() { NCCL_CHECK(ncclGroupEnd()); }
    template <class T>
    void all_reduce(T* data, size_t n, cudaStream_t stream) {
        NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type<T>(), ncclSum, comm_, stream));
    }
    // In place: rank r's piece of the sum, `stride` elements at data + r * stride.
    void reduce_scatter(float* data, size_t stride, cudaStream_t stream) {
        NCCL_CHECK(ncclReduceScatter(data, data + size_t(rank()) * stride, stride, ncclFloat32, ncclSum, comm_, stream));
    }
    // In place: every rank's piece of `stride` elements to every rank.
    template <class T>
    void all_gather(T* data, size_t stride, cudaStream_t stream) {
        NCCL_CHECK(ncclAllGather(data + size_t(rank()) * stride, data, stride, nccl_type<T>(), comm_, stream));
    }
    std::vector<uint64_t> gather_values(uint64_t v) { return group_->gather_values(v); }

  private:
    std::unique_ptr<dist::Group> group_;  // destroyed last: NCCL's communicator goes first
    ncclComm_t comm_ = nullptr;
};

template <class Communicator>
class DataParallel {
  public:
    static constexpr const char* source = __FILE__;
    // The same bookkeeping over another communicator (the GPU tests' threads).
    template <class Other>
    using WithCommunicator = DataParallel<Other>;

    DataParallel() : DataParallel(ParallelSettings{}) {}
    explicit DataParallel(const ParallelSettings& settings) : settings_(settings) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
    }
    ~DataParallel() {
        cudaEventDestroy(ready_);
        cudaEventDestroy(reduced_);
        cudaStreamDestroy(comm_stream_);
    }
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    int rank() const { return comm_.rank(); }
    int world() const { return comm_.world(); }
    std::string describe() const {
        if (world() == 1) return comm_.describe();
        return comm_.describe() + (shards_optimizer() ? ", ZeRO-1 (reduce-scatter, sharded AdamW, all-gather)"
                                                      : ", gradients all-reduced per block during backward");
    }
    bool shards_optimizer() const { return settings_.zero_stage == 1 && world() > 1; }
    Shard shard(size_t total) const { return shards_optimizer() ? shard_of(total, rank(), world()) : whole(total); }

    template <class T>
    void all_reduce_sum(CudaBackend::Context& ctx, T* data, size_t n) {
        comm_.all_reduce(data, n, ctx.stream);
    }

    // A block's gradients are final: the second stream waits for that point of the main
    // stream's work and sums them, in one group, while the main stream goes on.
    void gradients_ready(CudaBackend::Context& ctx, float* grads, const Bucket& bucket) {
        if (shards_optimizer()) return;
        // EXERCISE BEGIN stage06.bucketed_all_reduce TESTS Model.SeveralRanksTrainAsOne
        CUDA_CHECK(cudaEventRecord(ready_, ctx.stream));
        CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready_, 0));
        comm_.group_start();
        for (const auto& [offset, count] : bucket.pieces) comm_.all_reduce(grads + offset, count, comm_stream_);
        comm_.group_end();
        // EXERCISE STUB (void)ctx, (void)grads, (void)bucket;
        // EXERCISE END
    }

    void reduce_gradients(CudaBackend::Context& ctx, float* grads, const Shard& shard, bool in_buckets) {
        if (shards_optimizer()) {
            comm_.reduce_scatter(grads, shard.stride, ctx.stream);
        } else if (in_buckets) {
            // The optimizer waits for the last bucket's sum.
            CUDA_CHECK(cudaEventRecord(reduced_, comm_stream_));
            CUDA_CHECK(cudaStreamWaitEvent(ctx.stream, reduced_, 0));
        } else {
            comm_.all_reduce(grads, shard.padded, ctx.stream);
        }
    }

    template <class T>
    void all_gather(CudaBackend::Context& ctx, T* data, const Shard& shard) {
        comm_.all_gather(data, shard.stride, ctx.stream);
    }

    std::vector<uint64_t> gather_values(uint64_t v) { return comm_.gather_values(v); }

  private:
    ParallelSettings settings_;
    Communicator comm_;  // before the stream: NcclCommunicator picks the GPU the stream belongs to
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t ready_ = nullptr, reduced_ = nullptr;
};

using NcclDataParallel = DataParallel<NcclCommunicator>;

}  // namespace gpt::stage06
