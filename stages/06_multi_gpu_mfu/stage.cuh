// Stage 06 — several GPUs. Stage 05 on one GPU is as fast as this project makes one GPU; more
// throughput needs more GPUs. Each GPU gets a process with the whole model, its own windows of
// every step and its own share of the batch; NCCL sums the gradients so that every process takes
// the same optimizer step (nccl_data_parallel.cuh):
//   Parallel = NcclDataParallel   gradients all-reduced block by block during backward (or,
//                                 with --zero 1, reduce-scattered, AdamW on a shard, weights
//                                 all-gathered)
// The processes are started by mpirun, srun, torchrun or gpt_launch and meet through
// common/dist/group.h. With one GPU it trains exactly as stage 05. Every stage prints MFU, the
// FLOPs per second as a fraction of the GPU's dense bf16 peak (common/util/peak_flops.h).
// PyTorch equivalent: DistributedDataParallel(model) under torchrun, and nanoGPT's estimate_mfu.
#pragma once
#include "../05_vocab_padding/stage.cuh"
#include "nccl_data_parallel.cuh"

namespace gpt {

struct Stage06 : Stage05 {
    static constexpr const char* name = "06_multi_gpu_mfu";
    static constexpr const char* description =
        "stage 05 on several GPUs: NCCL data parallel, gradients reduced during backward, optional ZeRO-1";

    using Parallel = stage06::NcclDataParallel;
};

}  // namespace gpt
