// Every buffer a model allocates besides its optimizer's (the weights and AdamW's state,
// train/optimizer.h) and its context's (S::kContextBytes), in one table: Buffers::table() below.
// The model allocates what the table lists, and its memory estimate (GPT::memory_needed,
// train/memory.h) adds up the same table, so the estimate is what the model allocates, for
// every stage, batch, number of processes and ZeRO stage. (What libraries hold inside, NCCL's
// buffers or a CUDA Graph, is in no estimate.)
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "train/optimizer.h"
#include "train/parallel.h"
#include "train/policy.h"

namespace gpt {

template <class S>
struct Buffers {
    using act_t = typename S::act_t;
    using O = Ops<S>;
    template <class U>
    using Device = typename S::template Buffer<U>;  // the device's memory (the host's on the CPU)
    template <class U>
    using Pinned = typename S::template HostBuffer<U>;  // host memory the device copies to and from

    // The element count of every buffer, from the shapes alone.
    struct Sizes {
        size_t L;                     // blocks
        size_t tokens, staging;       // one micro-batch of token ids; the pinned slots of all of them
        size_t grads;                 // the parameters, padded to whole shards (train/parallel.h)
        size_t act, act3, act4;       // act_t of one N x C, N x 3C and N x 4C activation
        size_t rows;                  // one float per position (mean, rstd, loss)
        size_t att_saved;             // bytes attention saves for backward, per block (of its own types)
        size_t logits, classifier_saved, scratch;
        Sizes(const GPTConfig& config, int B, int T, int micro_batches, const Shard& shard) {
            const size_t N = size_t(B) * T, C = config.n_embd, NH = config.n_head;
            // [stage switch kVocabMultiple]
            const size_t Vp = config.padded_vocab(S::kVocabMultiple);  // logits' columns, wte's rows
            // [end stage switch kVocabMultiple]
            const size_t a = sizeof(act_t);
            L = config.n_layer;
            tokens = N;
            staging = 2 * N * micro_batches;  // inputs and targets of every micro-batch of a step
            grads = shard.padded;
            act = N * C, act3 = N * 3 * C, act4 = N * 4 * C, rows = N;
            att_saved = O::Attention::saved_bytes(B, T, C, NH, a);
            // [stage switch kLossChunkRows]
            // All N rows of logits, or (a stage whose loss works in chunks, train/model_graph.h)
            // one chunk's, but at least the T of one sequence, which text generation reads.
            const size_t logit_rows =
                S::kLossChunkRows > 0 ? std::min(N, std::max(size_t(S::kLossChunkRows), size_t(T))) : N;
            // [end stage switch kLossChunkRows]
            logits = logit_rows * Vp;
            // The fused classifier slot (ClassifierWithGrad) and the plain one (evaluate) share what
            // they save for backward, and every op shares one scratch area (both at least one
            // float, so that they have an address).
            classifier_saved = std::max<size_t>(1, floats(std::max(O::ClassifierWithGrad::saved_bytes(N, Vp, a),
                                                                   O::Classifier::saved_bytes(N, Vp, a))));
            scratch = std::max<size_t>(1, floats(std::max({O::Attention::scratch_bytes(B, T, C, NH, a),
                                                           O::Classifier::scratch_bytes(N, Vp, a),
                                                           O::ClassifierWithGrad::scratch_bytes(N, Vp, a)})));
        }
        static size_t floats(size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }
    };

    // What one transformer block saves for its backward: slices of `blocks`. ln1 of block l > 0
    // is written by block l - 1, whose last op is residual + LayerNorm.
    struct Layer {
        act_t *ln1, *qkv, *atty, *attproj, *residual2, *ln2, *fch, *fch_gelu, *fcproj, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
        void* att_saved;  // what the stage's attention keeps, in its own layout
    };

    // The device-side results of a step (stats): the sum of the losses, the gradients' sum of squares.
    static constexpr int kLossSum = 0, kGradSumSquares = 1, kNumStats = 2;

    // The table. An entry names a buffer and how many elements it holds; the buffer's type gives
    // their size.
    template <class Table>
    static void table(Table& t, const Sizes& n) {
        // Saved by every block for backward: block l's slices of one allocation.
        t.per_block(&Layer::ln1, n.act);
        t.per_block(&Layer::ln1_mean, n.rows);
        t.per_block(&Layer::ln1_rstd, n.rows);
        t.per_block(&Layer::qkv, n.act3);  // also text generation's key/value cache
        t.per_block(&Layer::att_saved, n.att_saved);  // void: a count of bytes
        t.per_block(&Layer::atty, n.act);
        t.per_block(&Layer::attproj, n.act);
        t.per_block(&Layer::residual2, n.act);
        t.per_block(&Layer::ln2, n.act);
        t.per_block(&Layer::ln2_mean, n.rows);
        t.per_block(&Layer::ln2_rstd, n.rows);
        t.per_block(&Layer::fch, n.act4);
        t.per_block(&Layer::fch_gelu, n.act4);
        t.per_block(&Layer::fcproj, n.act);
        t.per_block(&Layer::residual3, n.act);
        // The batch: token ids on the device, and every micro-batch's in pinned staging slots.
        t.device(&Buffers::inputs, n.tokens);
        t.device(&Buffers::targets, n.tokens);
        t.pinned(&Buffers::staging, n.staging);
        // The rest of the forward.
        t.device(&Buffers::encoded, n.act);  // the embeddings
        t.device(&Buffers::lnf, n.act);
        t.device(&Buffers::lnf_mean, n.rows);
        t.device(&Buffers::lnf_rstd, n.rows);
        t.device(&Buffers::logits, n.logits);  // and their gradient, written over them (one chunk's, or all)
        t.device(&Buffers::classifier_saved, n.classifier_saved);
        t.device(&Buffers::losses, n.rows);
        // Backward: the parameters' gradients, and one buffer of each activation shape, reused by
        // every block (dfch is the gradient of fch: MatmulBackwardGelu carries it through the GELU).
        t.device(&Buffers::grads, n.grads);
        t.device(&Buffers::dresidual, n.act);
        t.device(&Buffers::dbuf, n.act);
        t.device(&Buffers::dlnf, n.act);
        t.device(&Buffers::dqkv, n.act3);
        t.device(&Buffers::dfch, n.act4);
        t.device(&Buffers::scratch, n.scratch);  // any op's temporary memory
        // What a step reads (learning rate, step count) and reports (stats), on both sides.
        t.device(&Buffers::scalars, 1);
        t.pinned(&Buffers::scalars_staging, 1);
        t.device(&Buffers::stats, kNumStats);
        t.pinned(&Buffers::stats_host, kNumStats);
    }

    std::vector<Layer> layers;
    Device<float> blocks;  // the layers' slices (a GPU's memory has no types; on the CPU act_t is float)
    Device<int> inputs, targets;
    Pinned<int> staging;
    Device<act_t> encoded, lnf, logits, dresidual, dbuf, dlnf, dqkv, dfch;
    Device<float> lnf_mean, lnf_rstd, classifier_saved, losses, grads, scratch;
    Device<StepScalars> scalars;
    Pinned<StepScalars> scalars_staging;
    Device<double> stats;
    Pinned<double> stats_host;

    // Bytes of the table: `device` in S::Buffer, `pinned` in S::HostBuffer.
    struct Bytes {
        size_t device = 0, pinned = 0;
    };
    static Bytes bytes(const Sizes& n) {
        Count count;
        table(count, n);
        return {count.device_bytes + count.per_block_floats * n.L * sizeof(float), count.pinned_bytes};
    }

    // Allocates every buffer of the table.
    explicit Buffers(const Sizes& n) : layers(n.L) {
        Count count;
        table(count, n);
        blocks = Device<float>(count.per_block_floats * n.L);
        Allocate allocate{*this, blocks.data(), count.per_block_floats};
        table(allocate, n);
    }

  private:
    template <class Buffer>
    using element_of = std::remove_pointer_t<decltype(std::declval<Buffer&>().data())>;

    // Every slice of `blocks` starts a multiple of 256 bytes from its start: on a GPU, whose
    // allocations are 256-byte aligned, on a 256-byte boundary, as a fresh allocation would
    // (kernels may load 16 bytes at a time). A void slice (what attention saves) counts bytes.
    template <class U>
    static size_t slice_floats(size_t count) {
        size_t bytes = count;
        if constexpr (!std::is_void_v<U>) bytes *= sizeof(U);
        return (bytes + 255) / 256 * (256 / sizeof(float));
    }

    struct Count {
        size_t per_block_floats = 0, device_bytes = 0, pinned_bytes = 0;
        template <class U>
        void per_block(U* Layer::*, size_t count) { per_block_floats += slice_floats<U>(count); }
        template <class Buffer>
        void device(Buffer Buffers::*, size_t count) { device_bytes += count * sizeof(element_of<Buffer>); }
        template <class Buffer>
        void pinned(Buffer Buffers::*, size_t count) { pinned_bytes += count * sizeof(element_of<Buffer>); }
    };

    struct Allocate {
        Buffers& b;
        float* blocks;
        size_t per_block_floats, offset = 0;  // floats per block; the next slice's place in a block
        template <class U>
        void per_block(U* Layer::*slice, size_t count) {
            for (size_t l = 0; l < b.layers.size(); ++l)
                b.layers[l].*slice = reinterpret_cast<U*>(blocks + l * per_block_floats + offset);
            offset += slice_floats<U>(count);
        }
        template <class Buffer>
        void device(Buffer Buffers::*buffer, size_t count) { b.*buffer = Buffer(count); }
        template <class Buffer>
        void pinned(Buffer Buffers::*buffer, size_t count) { b.*buffer = Buffer(count); }
    };
};

}  // namespace gpt
