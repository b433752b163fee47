// Stage 04: AdamW over all parameters in one launch, at the speed of memory. Stage 02 launched its
// update once per parameter tensor, 16 launches a step, 10 of them over tensors of at most 37K
// elements at GPT-2 124M (biases, LayerNorm weights and biases): less than one wave of blocks
// each, a kernel that is over almost as soon as it has started, the GPU mostly waiting for the
// next one. Here one grid-stride kernel walks the flat parameter array, and each thread finds
// the tensor (and so the weight decay) of each element in a table of the 16 tensors' ends,
// passed by value.
//
// The update does a few dozen FLOPs per parameter and moves 30 bytes (bf16 copy; 32 in fp32):
//   fp32 weight read + written 8, gradient read 4, m read + written 8, v read + written 8,
//   act_t copy written 2
// so its time is those bytes over the memory bandwidth. A thread takes 4 neighbouring parameters
// at a time and moves each array 16 bytes at a time (the bf16 copy 8), and it computes what every
// parameter of the step shares (clip factor, learning rate, the bias corrections' powf) once,
// before its loop. Predicted, not measured: within 10% of the copy bandwidth that
// bench_ceilings measures, at GPT-2 124M (124,439,808 parameters, 3.73 GB) on the H100 of
// docs/results/2026-11-23_h100 (3,012 GB/s) 1.24 ms at the copy's speed, at most 1.38 ms.
//
//   launches per step   stage 02: 1 memset + 1 norm + 16 updates = 18    stage 04: 3
//
// The arithmetic is stage 00's adamw_element, so the update is stage 02's bit for bit
// (Kernels.AdamW compares the two).
// PyTorch equivalent: torch.optim.AdamW(..., fused=True), which updates many tensors per launch.
#pragma once
#include <algorithm>

#include "../02_bf16_autocast/mixed_adamw.cuh"
#include "cuda/backend.cuh"
#include "model/params.h"
#include "train/optimizer.h"

namespace gpt::stage04 {

// Where each tensor ends in the flat array (sorted: tensors follow each other without gaps) and
// the weight decay it gets: 128 + 64 bytes, small enough to be a kernel argument.
struct TensorTable {
    size_t end[kNumParamTensors];  // one past the tensor's last element
    float weight_decay[kNumParamTensors];
};

constexpr unsigned kAdamWThreads = 256;
constexpr int kAdamWPack = 4;  // parameters a thread takes at a time: 16 bytes of fp32

// [begin, end): the shard this process updates (all parameters with one process); m and v hold
// the shard only, element i at m[i - begin]. With `packed`, [begin, end) is walked in packs of 4
// from `begin` on, then the last (end - begin) % 4 elements one by one; the host checks that
// every pack is 16-byte aligned in every array (begin a multiple of 4, the arrays aligned), and
// else `packed` is false and every element goes one by one. Tensor ends fall anywhere, so one
// pack may hold parameters of two tensors: the weight decay is looked up per parameter.
template <class Act>
__global__ void __launch_bounds__(kAdamWThreads)
    fused_adamw_kernel(float* params, Act* act_copy, const float* grads, float* m, float* v, size_t begin,
                       size_t end, bool packed, AdamWSettings s, TensorTable tensors, const StepScalars* step,
                       const double* grad_sum_squares) {
    using F = Pack<float, kAdamWPack>;
    using A = Pack<Act, kAdamWPack>;  // 8 bytes in bf16, 16 in fp32
    // What every parameter of the step shares, once per thread instead of once per parameter.
    const float scale = stage00::device_clip_factor(grad_sum_squares, s);
    const float lr = step->lr;
    const float bias1 = stage00::bias_correction(s.beta1, step->t);
    const float bias2 = stage00::bias_correction(s.beta2, step->t);

    // One parameter: its tensor's weight decay, then stage 00's update. A thread's indices only
    // grow (packs first, then the tail past them), so its tensor only moves forward.
    int tensor = 0;
    auto update = [&](size_t i, float& p, float g, float& mi, float& vi) {
        while (i >= tensors.end[tensor]) ++tensor;  // at the last tensor at the latest: it ends the array
        s.weight_decay = tensors.weight_decay[tensor];
        p = stage00::adamw_element(p, g * scale, mi, vi, lr, bias1, bias2, s);
    };

    const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
    const size_t threads = size_t(gridDim.x) * blockDim.x;
    const size_t packed_end = packed ? end - (end - begin) % kAdamWPack : begin;
    for (size_t i = begin + kAdamWPack * first; i < packed_end; i += kAdamWPack * threads) {
        // The pack at element i of each array (i - begin in the moments'): one access each.
        F p = load_pack<F>(params + i, 0), mi = load_pack<F>(m + (i - begin), 0), vi = load_pack<F>(v + (i - begin), 0);
        const F g = load_pack<F>(grads + i, 0);
        A copy;
#pragma unroll
        for (int e = 0; e < kAdamWPack; ++e) {
            update(i + e, p.v[e], g.v[e], mi.v[e], vi.v[e]);
            copy.v[e] = from_float<Act>(p.v[e]);  // the copy the matmuls read, rounded once
        }
        store_pack(params + i, 0, p);
        store_pack(act_copy + i, 0, copy);
        store_pack(m + (i - begin), 0, mi);
        store_pack(v + (i - begin), 0, vi);
    }
    // What no pack covers: the last few elements, or all when the arrays do not allow packs.
    for (size_t i = packed_end + first; i < end; i += threads) {
        float p = params[i], mi = m[i - begin], vi = v[i - begin];
        update(i, p, grads[i], mi, vi);
        params[i] = p;
        act_copy[i] = from_float<Act>(p);
        m[i - begin] = mi;
        v[i - begin] = vi;
    }
}

// Stage 02's optimizer (memory, constructor, bf16 copy, gradient norm) with the one-launch update.
template <class Act>
class FusedAdamW : public stage02::MixedPrecisionAdamW<Act> {
    using Base = stage02::MixedPrecisionAdamW<Act>;

  public:
    static constexpr const char* source = __FILE__;
    // The same update a launch per tensor: Kernels.AdamW checks that the two agree bit for bit.
    using PerTensor = Base;

    using Base::Base;

    template <class AfterNorm = NothingAfterNorm>
    void step(CudaBackend::Context& ctx, const float* grads, const AdamWSettings& settings, const StepScalars* step,
              double* grad_sum_squares, AfterNorm&& after_norm = {}) {
        this->sum_of_squares(ctx, grad_sum_squares, grads);
        after_norm();
        // The table of every tensor's end and weight decay: the same decays stage 02 passes
        // tensor by tensor.
        TensorTable tensors{};
        const ParamLayout& layout = this->layout();
        for (int i = 0; i < kNumParamTensors; ++i) {
            tensors.end[i] = layout.offset[i] + layout.size[i];
            tensors.weight_decay[i] = ParamLayout::decays(i) ? settings.weight_decay : 0.0f;
        }
        const Shard& shard = this->shard();
        if (shard.count == 0) return;
        // Packs of 4 need element `begin` on a 16-byte boundary in every array: the moments start
        // there, the others (the whole array) at 0. A ZeRO-1 shard can start anywhere (Shard,
        // train/parallel.h); one that starts off a multiple of 4 is updated element by element.
        float* params = this->master();
        Act* act_copy = this->act_copy_.data();
        const bool packed = shard.begin % kAdamWPack == 0 && aligned16(params) && aligned16(act_copy) &&
                            aligned16(grads) && aligned16(this->m()) && aligned16(this->v());
        const size_t items = packed ? cuda::ceil_div(shard.count, kAdamWPack) : shard.count;
        // As many blocks as are resident at once (one wave), and no more than there is work for.
        const unsigned grid = std::min(cuda::ceil_div(items, kAdamWThreads),
                                       cuda::one_wave(fused_adamw_kernel<Act>, kAdamWThreads, 0));
        fused_adamw_kernel<<<grid, kAdamWThreads, 0, ctx.stream>>>(params, act_copy, grads, this->m(), this->v(),
                                                                   shard.begin, shard.end(), packed, settings,
                                                                   tensors, step, grad_sum_squares);
        LAUNCH_CHECK();
    }
};

}  // namespace gpt::stage04
