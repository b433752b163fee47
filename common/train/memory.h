// Memory up front. Before the model allocates anything, the trainer estimates what it will hold
// and refuses a run that cannot fit, in one line that names the estimate, what is available and
// the largest --batch that fits. Without this, a run too large for the host is killed by the
// system's out-of-memory killer halfway through allocating (no message at all), and one too
// large for the GPU fails deep inside a CUDA allocation.
#pragma once
#include <cstddef>
#include <string>

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

// Throws the refusal when a batch of B sequences does not fit in `available`, given what one
// and two sequences need (memory grows linearly with the batch). `run` describes the run, as
// "--batch 8 --seq 64 of L=4 H=4 ...".
void require_memory(const MemoryNeed& one, const MemoryNeed& two, int B, const MemoryNeed& available,
                    const std::string& run);

// The model of stage S for B x T micro-batches: its buffers (device memory on a GPU, host memory
// on the CPU), its pinned host buffers, and the host copies of the parameters the trainer makes
// while loading them (the array and its padded copy). parallel: the processes it trains with
// (null: alone), whose ZeRO-1 shard of the optimizer state this process keeps.
template <class S>
void check_memory(const GPTConfig& config, int B, int T, int micro_batches,
                  const typename GPT<S>::Parallel* parallel = nullptr) {
    const size_t copies = 2 * ParamLayout(config).total() * sizeof(float);
    const auto need = [&](int b) {
        const auto m = GPT<S>::memory_needed(config, b, T, micro_batches, parallel);
        if (S::kIsGpu) return MemoryNeed{m.buffers, m.host + copies};
        return MemoryNeed{0, m.buffers + m.host + copies};  // the CPU's buffers are host memory
    };
    require_memory(need(1), need(2), B, MemoryNeed{S::free_device_memory(), available_host_memory()},
                   "--batch " + std::to_string(B) + " --seq " + std::to_string(T) + " of " + config.describe());
}

}  // namespace gpt
