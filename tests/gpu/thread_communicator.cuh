// Several ranks on one GPU, for the GPU tests of data parallelism: each rank is a thread with its
// own model and stream, and the collectives go through host memory, in rank order. NCCL takes one
// GPU per rank, so this is how one GPU tests the bookkeeping stage 06 does around NCCL's calls
// (stages/06_multi_gpu_mfu/nccl_data_parallel.cuh, DataParallel). Every collective waits for its
// stream first: it cannot be captured in a CUDA Graph, and the models that use it do not capture.
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/check.cuh"
#include "util/error.h"

namespace gpt::test {

class ThreadCommunicator {
  public:
    // What the ranks share. A test makes one, and each thread calls join() before it builds its
    // model (which constructs the communicator).
    struct Ranks {
        explicit Ranks(int world) : world(world), slots(world) {}
        int world;
        std::mutex mutex;
        std::condition_variable changed;
        int arrived = 0;
        long generation = 0;
        bool aborted = false;
        std::vector<std::vector<char>> slots;  // each rank's contribution to the current collective

        // A rank that failed stops the others instead of leaving them waiting.
        void abort() {
            std::lock_guard<std::mutex> lock(mutex);
            aborted = true;
            changed.notify_all();
        }
    };
    static void join(Ranks& ranks, int rank) {
        place().ranks = &ranks;
        place().rank = rank;
    }

    ThreadCommunicator() : ranks_(place().ranks), rank_(place().rank) {
        if (!ranks_) throw Error("ThreadCommunicator: the thread did not join() a Ranks first");
    }

    int rank() const { return rank_; }
    int world() const { return ranks_->world; }
    std::string describe() const { return std::to_string(world()) + " ranks as threads of one process"; }

    void group_start() {}
    void group_end() {}

    template <class T>
    void all_reduce(T* data, size_t n, cudaStream_t stream) {
        static_assert(std::is_floating_point_v<T>, "sums of float or double");
        const std::vector<T> sum = summed(data, n, stream);
        copy_in(data, sum.data(), n, stream);
        barrier();  // no rank changes its slot before every rank has read them all
    }
    void reduce_scatter(float* data, size_t stride, cudaStream_t stream) {
        const std::vector<float> sum = summed(data, stride * world(), stream);
        copy_in(data + rank_ * stride, sum.data() + rank_ * stride, stride, stream);
        barrier();
    }
    template <class T>
    void all_gather(T* data, size_t stride, cudaStream_t stream) {
        contribute(data + rank_ * stride, stride, stream);
        for (int r = 0; r < world(); ++r)
            if (r != rank_) copy_in(data + r * stride, reinterpret_cast<const T*>(ranks_->slots[r].data()), stride, stream);
        barrier();
    }
    std::vector<uint64_t> gather_values(uint64_t v) {
        set_slot(&v, sizeof(v));
        barrier();
        std::vector<uint64_t> all(world());
        for (int r = 0; r < world(); ++r) std::memcpy(&all[r], ranks_->slots[r].data(), sizeof(uint64_t));
        barrier();
        return all;
    }

  private:
    struct Place {
        Ranks* ranks = nullptr;
        int rank = 0;
    };
    static Place& place() {
        thread_local Place p;
        return p;
    }

    // Every rank here, or an error if one of them failed (or none came for a minute).
    void barrier() {
        std::unique_lock<std::mutex> lock(ranks_->mutex);
        const long generation = ranks_->generation;
        if (++ranks_->arrived == world()) {
            ranks_->arrived = 0;
            ++ranks_->generation;
            ranks_->changed.notify_all();
        } else if (!ranks_->changed.wait_for(lock, std::chrono::seconds(60), [&] {
                       return ranks_->generation != generation || ranks_->aborted;
                   })) {
            ranks_->aborted = true;
            ranks_->changed.notify_all();
        }
        if (ranks_->aborted) throw Error("rank " + std::to_string(rank_) + ": another rank failed or never came");
    }
    void set_slot(const void* host, size_t bytes) {
        ranks_->slots[rank_].resize(bytes);
        std::memcpy(ranks_->slots[rank_].data(), host, bytes);
    }
    // This rank's n values of `data` (device) into its slot, once its stream has written them.
    template <class T>
    void contribute(const T* data, size_t n, cudaStream_t stream) {
        std::vector<char>& slot = ranks_->slots[rank_];
        slot.resize(n * sizeof(T));
        CUDA_CHECK(cudaMemcpyAsync(slot.data(), data, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        barrier();
    }
    template <class T>
    std::vector<T> summed(const T* data, size_t n, cudaStream_t stream) {
        contribute(data, n, stream);
        std::vector<T> sum(n, T(0));
        for (int r = 0; r < world(); ++r) {  // in rank order: the same sum on every rank
            const T* part = reinterpret_cast<const T*>(ranks_->slots[r].data());
            for (size_t i = 0; i < n; ++i) sum[i] += part[i];
        }
        return sum;
    }
    template <class T>
    static void copy_in(T* device, const T* host, size_t n, cudaStream_t stream) {
        CUDA_CHECK(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // the host array may go away after we return
    }

    Ranks* ranks_;
    int rank_;
};

}  // namespace gpt::test
