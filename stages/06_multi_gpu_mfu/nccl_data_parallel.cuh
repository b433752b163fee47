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

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/backend.cuh"
#include "dist/group.h"
#include "dist/watchdog.h"
#include "train/parallel.h"
#include "util/error.h"

namespace gpt::stage06 {

// An NCCL call that failed. A peer that is gone shows as a remote or system error, which the
// watchdog may be able to pin on the process that failed (dist::PeerLost gives it a moment).
[[noreturn]] inline void throw_nccl_error(const char* call, ncclResult_t result) {
    const std::string what = std::string("NCCL: ") + call + ": " + ncclGetErrorString(result);
    if (result == ncclRemoteError || result == ncclSystemError)
        throw dist::PeerLost(what + " (did another process fail?)", -1);
    throw Error(what);
}

#define NCCL_CHECK(call)                                                                  \
    do {                                                                                  \
        const ncclResult_t nccl_result_ = (call);                                         \
        if (nccl_result_ != ncclSuccess) ::gpt::stage06::throw_nccl_error(#call, nccl_result_); \
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
// group_start() and group_end() they go out as one. A watchdog (dist/watchdog.h) polls NCCL's
// asynchronous error and the other processes' failures, and aborts the communicator when one
// comes: a collective waiting for a process that failed would otherwise spin on the GPU forever.
class NcclCommunicator : public dist::Watched {
  public:
    explicit NcclCommunicator(const ParallelSettings& settings)
        : group_(std::make_unique<dist::Group>(dist::launch_from_environment())),
          step_timeout_s_(settings.step_timeout_s) {
        // Before NCCL starts: ncclCommInitRank waits for every rank, and one that failed before
        // it would leave the others waiting there.
        if (settings.watchdog)
            watch(*group_, settings.step_timeout_s, {[this] { return async_error(); }, [this] { abort(); }});
        try {
            start();
        } catch (const std::exception& e) {
            fail(e);  // with the watchdog, the others hear of it and this process ends here
            throw;
        }
    }
    ~NcclCommunicator() {
        {
            // Still watched: a destroy that waits for a peer which failed meanwhile is ended by
            // the watchdog. Unwinding from an error that did not go through fail(): aborting
            // does not wait for the others, destroying could.
            std::lock_guard<std::mutex> lock(mutex_);
            if (comm_) std::uncaught_exceptions() > 0 ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
            comm_ = nullptr;
        }
        unwatch();  // a clean end tells the others
    }
    NcclCommunicator(const NcclCommunicator&) = delete;
    NcclCommunicator& operator=(const NcclCommunicator&) = delete;

    int rank() const { return group_->rank(); }
    int world() const { return group_->world(); }
    std::string describe() const {
        int version = 0;
        ncclGetVersion(&version);
        const std::string nccl = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100);
        char limit[48] = "";
        if (watched() && step_timeout_s_ > 0) std::snprintf(limit, sizeof(limit), ", step limit %g s", step_timeout_s_);
        const std::string watch = limit;
        if (world() == 1) return "one process (" + nccl + ", GPU " + std::to_string(device_) + watch + ")";
        return std::to_string(world()) + " processes over " + nccl + " on " + std::to_string(group_->hosts()) +
               (group_->hosts() == 1 ? " host" : " hosts") + " (" + std::to_string(group_->local_world()) +
               " on rank 0's), " + group_->how() + watch;
    }

    void group_start() { NCCL_CHECK(ncclGroupStart()); }
    void group_end() {
        std::lock_guard<std::mutex> lock(mutex_);  // the group's operations start here
        NCCL_CHECK(ncclGroupEnd());
    }
    template <class T>
    void all_reduce(T* data, size_t n, cudaStream_t stream) {
        std::lock_guard<std::mutex> lock(mutex_);
        NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type<T>(), ncclSum, comm(), stream));
    }
    // In place: rank r's piece of the sum, `stride` elements at data + r * stride.
    void reduce_scatter(float* data, size_t stride, cudaStream_t stream) {
        std::lock_guard<std::mutex> lock(mutex_);
        NCCL_CHECK(ncclReduceScatter(data, data + size_t(rank()) * stride, stride, ncclFloat32, ncclSum, comm(), stream));
    }
    // In place: every rank's piece of `stride` elements to every rank.
    template <class T>
    void all_gather(T* data, size_t stride, cudaStream_t stream) {
        std::lock_guard<std::mutex> lock(mutex_);
        NCCL_CHECK(ncclAllGather(data + size_t(rank()) * stride, data, stride, nccl_type<T>(), comm(), stream));
    }
    std::vector<uint64_t> gather_values(uint64_t v) { return group_->gather_values(v); }

  private:
    // This process's GPU, then NCCL's communicator over every process.
    void start() {
        const std::string who = "rank " + std::to_string(rank()) + " of " + std::to_string(world());
        // Two processes on one GPU would fail in NCCL with less to go on.
        if (!group_->placement_disagreement().empty()) throw Error(group_->placement_disagreement());
        // One GPU per process, before any CUDA object exists (train/processes.h, join_the_run).
        device_ = cuda::use_local_device(group_->local_rank(), group_->local_world(), who);
        ncclUniqueId id{};
        if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        group_->broadcast(&id, sizeof(id));
        ncclComm_t comm = nullptr;
        const ncclResult_t started = ncclCommInitRank(&comm, world(), id, rank());
        if (started != ncclSuccess) {
            const std::string why = ncclGetLastError(comm);
            if (comm) ncclCommAbort(comm);
            // Often because another process failed meanwhile: PeerLost lets the watchdog say so.
            throw dist::PeerLost(who + ": NCCL could not start (" + ncclGetErrorString(started) + ": " + why +
                                     "); NCCL_DEBUG=INFO says more",
                                 -1);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        comm_ = comm;
    }
    // With mutex_ held.
    ncclComm_t comm() const {
        if (!comm_) throw Error("rank " + std::to_string(rank()) + ": the NCCL communicator was aborted");
        return comm_;
    }
    // Called by the watchdog's thread, which must never wait here: the main thread may hold the
    // lock while it queues an operation.
    std::string async_error() {
        std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
        ncclResult_t state = ncclSuccess;
        if (!lock.owns_lock() || !comm_ || ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return "";
        if (state == ncclSuccess || state == ncclInProgress) return "";
        return std::string("NCCL: ") + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) + ")";
    }
    // Once only, from whichever thread gets here first; never while an operation is being queued.
    void abort() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (comm_) ncclCommAbort(comm_);
        comm_ = nullptr;
    }

    std::unique_ptr<dist::Group> group_;  // destroyed last: NCCL's communicator goes first
    double step_timeout_s_;
    std::mutex mutex_;  // guards comm_: the watchdog may abort it from its own thread
    ncclComm_t comm_ = nullptr;
    int device_ = 0;
};

template <class Communicator>
class DataParallel {
  public:
    static constexpr const char* source = __FILE__;
    // The same bookkeeping over another communicator (the GPU tests' threads).
    template <class Other>
    using WithCommunicator = DataParallel<Other>;

    DataParallel() : DataParallel(ParallelSettings{}) {}
    explicit DataParallel(const ParallelSettings& settings) : settings_(settings), comm_(settings) {
        // The reductions must not queue behind backward's large matmuls: highest priority.
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
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
        // EXERCISE BEGIN stage06.bucketed_all_reduce TESTS Model.SeveralRanksTrainAsOne|Model.LossCurveMatchesPyTorch|Model.FullSizeCurveMatchesPyTorch|Model.AllocatesOnlyOnce|Model.EvaluationLossesMatchTheCpu|Model.CapturedStepMatchesUncaptured|Model.CapturedStepInChunksMatchesUncaptured|Model.PaddedRowsStayZero|Model.PaddingChangesNothing|Model.OneProcessTrainsAsWithoutParallel
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
    void starting(const std::string& what) { comm_.starting(what); }
    void fail(const std::exception& error) { comm_.fail(error); }
    void hold_if_stopping() { comm_.hold_if_stopping(); }

  private:
    ParallelSettings settings_;
    Communicator comm_;  // before the stream: NcclCommunicator picks the GPU the stream belongs to
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t ready_ = nullptr, reduced_ = nullptr;
};

using NcclDataParallel = DataParallel<NcclCommunicator>;

}  // namespace gpt::stage06
