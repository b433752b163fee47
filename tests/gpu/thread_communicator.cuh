// Several ranks on one GPU, for the GPU tests of data parallelism: each rank is a thread with its
// own model and stream, and the collectives go through the host, over the same TCP group the CPU
// reference trains with (common/dist/group.h: sums in rank order, the same on every rank). NCCL
// takes one GPU per rank, so this is how one GPU tests the bookkeeping stage 06 does around
// NCCL's calls (stages/06_multi_gpu_mfu/nccl_data_parallel.cuh, DataParallel). Every collective
// waits for its stream first: it cannot be captured in a CUDA Graph, and the models that use it
// do not capture.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/check.cuh"
#include "dist/group.h"
#include "train/parallel.h"
#include "util/error.h"

namespace gpt::test {

class ThreadCommunicator {
  public:
    // Each thread says which rank of how many it is before it builds its model (which constructs
    // the communicator). The ranks meet as dist::Group says (the test sets GPT_INIT_FILE).
    static void join(int rank, int world) {
        place().rank = rank;
        place().world = world;
    }

    explicit ThreadCommunicator(const ParallelSettings& = {}) : group_(launch()) {}

    int rank() const { return group_.rank(); }
    int world() const { return group_.world(); }
    std::string describe() const { return std::to_string(world()) + " ranks as threads of one process"; }

    void group_start() {}
    void group_end() {}

    template <class T>
    void all_reduce(T* data, size_t n, cudaStream_t stream) {
        static_assert(std::is_floating_point_v<T>, "sums of float or double");
        std::vector<T> host = download(data, n, stream);
        group_.all_reduce_sum(host.data(), n);
        upload(data, host.data(), n, stream);
    }
    void reduce_scatter(float* data, size_t stride, cudaStream_t stream) {
        std::vector<float> host = download(data, stride * world(), stream);
        group_.all_reduce_sum(host.data(), host.size());
        upload(data + rank() * stride, host.data() + rank() * stride, stride, stream);
    }
    template <class T>
    void all_gather(T* data, size_t stride, cudaStream_t stream) {
        std::vector<T> host = download(data, stride * world(), stream);
        group_.all_gather(host.data(), stride * sizeof(T));
        upload(data, host.data(), host.size(), stream);
    }
    std::vector<uint64_t> gather_values(uint64_t v) { return group_.gather_values(v); }
    void starting(const std::string&) {}
    void fail(const std::exception&) {}  // a test's threads: the test reports
    void hold_if_stopping() {}

  private:
    struct Place {
        int rank = -1, world = 0;
    };
    static Place& place() {
        thread_local Place p;
        return p;
    }
    static dist::Launch launch() {
        if (place().rank < 0) throw Error("ThreadCommunicator: the thread did not join() first");
        dist::Launch l;
        l.rank = place().rank;
        l.world = place().world;
        // Every rank on the one GPU: no local rank to check against the host names.
        l.launcher = "threads";
        return l;
    }
    // Once the stream has written them.
    template <class T>
    static std::vector<T> download(const T* device, size_t n, cudaStream_t stream) {
        std::vector<T> host(n);
        CUDA_CHECK(cudaMemcpyAsync(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return host;
    }
    template <class T>
    static void upload(T* device, const T* host, size_t n, cudaStream_t stream) {
        CUDA_CHECK(cudaMemcpyAsync(device, host, n * sizeof(T), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));  // the host array goes away when we return
    }

    dist::Group group_;
};

}  // namespace gpt::test
