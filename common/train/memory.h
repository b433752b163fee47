// Memory up front. Before the model allocates anything, the trainer estimates what it will hold
// and refuses a run that cannot fit, in one line that names the estimate, what is available and
// the largest --batch that fits. Without this, a run too large for the host is killed by the
// system's out-of-memory killer halfway through allocating (no message at all), and one too
// large for the GPU fails deep inside a CUDA allocation.
#pragma once
#include <cstddef>
#include <limits>
#include <string>
#include <utility>

#include "model/config.h"
#include "model/params.h"
#include "train/gpt.h"

namespace gpt {

// Bytes the system can still give this process: MemAvailable of /proc/meminfo, lowered to the
// room left under the memory limit of its cgroup (a container's or a batch job's), if it has
// one. The largest size_t where neither can be read (then nothing is refused).
size_t available_host_memory();

// Bytes of device and of host memory.
struct MemoryNeed {
    size_t device = 0, host = 0;
};

// GPT_MEMORY_LIMIT, read from the environment: at most this many bytes ("512M", "16G", "16.5G";
// K, M, G, T are powers of 1024) for the model's memory, the GPU's or, on the CPU, the host's.
// It tries how a run splits on a smaller card, or leaves room for another process. 0 when unset;
// a value that is not a size is an error naming the variable.
size_t memory_limit_from_environment();

// What a run can use: the device's free memory and the host's available memory, the model's
// kind lowered to GPT_MEMORY_LIMIT where that is set (model_on_device: the model's buffers are
// device memory).
MemoryNeed available_memory(size_t free_device, bool model_on_device);

// Whether a batch of B sequences fits in `available`, given what one and two sequences need
// (memory grows linearly with the batch).
bool fits_in_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available);

// Where a batch of B sequences does not fit: "needs about 28.8 GiB of device memory, but 22.1 GiB
// is available" (and that GPT_MEMORY_LIMIT set it, if it did; itemized: what the estimate counts
// after "memory"); "" when it fits.
std::string memory_shortfall(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                             bool itemized = false);

// Throws the refusal when a batch of B sequences does not fit (fits_in_memory). `run` describes
// the run, as "--batch 8 --seq 64 of L=4 H=4 ...".
void require_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                    const std::string& run);

// What the model of stage S needs for micro-batches of one and of two sequences of T tokens: its
// buffers (device memory on a GPU, host memory on the CPU), its pinned host buffers, and the host
// copies of the parameters the trainer makes while loading them (the array and its padded copy).
// parallel: the processes it trains with (null: alone), whose ZeRO-1 shard of the optimizer state
// this process keeps.
template <class S>
std::pair<MemoryNeed, MemoryNeed> memory_per_batch(const GPTConfig& config, int T, int micro_batches,
                                                   const typename GPT<S>::Parallel* parallel) {
    const size_t copies = 2 * ParamLayout(config).total() * sizeof(float);
    const auto need = [&](int b) {
        const auto m = GPT<S>::memory_needed(config, b, T, micro_batches, parallel);
        if (S::kIsGpu) return MemoryNeed{m.buffers, m.host + copies};
        return MemoryNeed{0, m.buffers + m.host + copies};  // the CPU's buffers are host memory
    };
    return {need(1), need(2)};
}

template <class S>
MemoryNeed available_memory() {
    return available_memory(S::free_device_memory(), S::kIsGpu);
}

// Refuses a run of stage S with B x T micro-batches that cannot fit, before anything is allocated.
template <class S>
void check_memory(const GPTConfig& config, int B, int T, int micro_batches,
                  const typename GPT<S>::Parallel* parallel = nullptr) {
    const auto [one, two] = memory_per_batch<S>(config, T, micro_batches, parallel);
    require_memory(one, two, B, available_memory<S>(),
                   "--batch " + std::to_string(B) + " --seq " + std::to_string(T) + " of " + config.describe());
}

// For a run whose batch was not given: the fewest micro-batches k (a divisor of B, so that the
// tokens per step stay the same) such that micro-batches of B / k sequences fit, k micro-batches
// for each one the run had. 1 when B fits as it is; 0 when not even one sequence fits.
template <class S>
int fewest_micro_batches_that_fit(const GPTConfig& config, int B, int T, int micro_batches,
                                  const typename GPT<S>::Parallel* parallel = nullptr) {
    const MemoryNeed available = available_memory<S>();
    for (int k = 1; k <= B; ++k) {
        if (B % k != 0 || micro_batches > std::numeric_limits<int>::max() / k) continue;
        const auto [one, two] = memory_per_batch<S>(config, T, micro_batches * k, parallel);
        if (fits_in_memory(one, two, B / k, available)) return k;
    }
    return 0;
}

}  // namespace gpt
