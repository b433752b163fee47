// The one training loop, shared by the CPU reference and every GPU stage.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "train/gpt.h"
#include "train/logger.h"
#include "train/memory.h"
#include "train/options.h"
#include "train/policy.h"
#include "train/sampler.h"
#include "train/schedule.h"
#include "util/error.h"
#include "util/file.h"

namespace gpt {

inline double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The mean loss over `batches` batches of the validation data, without gradients.
template <class S>
float validation_loss(GPT<S>& model, DataLoader& val, int batches) {
    val.reset();
    for (int i = 0; i < batches; ++i) {
        const Batch b = val.next();
        model.forward(b.inputs.data(), b.targets.data(), val.B(), val.T());
        model.evaluate();
    }
    return model.sync().loss;
}

// Micro-batches per optimizer step: --total-batch tokens split into B x T windows on each of
// `world` processes.
inline int micro_batches_per_step(const TrainOptions& opt, int world) {
    const long long per_micro = static_cast<long long>(opt.batch) * opt.seq * world;
    if (opt.total_batch == 0) return 1;
    if (opt.total_batch % per_micro != 0)
        throw Error("--total-batch " + std::to_string(opt.total_batch) + " is not a multiple of the tokens of one " +
                    "micro-batch on all processes, B*T*world = " + std::to_string(opt.batch) + "*" +
                    std::to_string(opt.seq) + "*" + std::to_string(world) + " = " + std::to_string(per_micro));
    return static_cast<int>(opt.total_batch / per_micro);
}

template <class S>
int train(const TrainOptions& opt) {
    S::check_device();

    // Model: a checkpoint's config wins over --model.
    Checkpoint start;
    const std::string ckpt_path = !opt.resume.empty() ? opt.resume : opt.init;
    if (!ckpt_path.empty()) {
        start = load_checkpoint(ckpt_path);
    } else {
        start.config = config_by_name(opt.model);
    }
    const GPTConfig& config = start.config;
    if (opt.seq > config.max_seq_len)
        throw Error("--seq " + std::to_string(opt.seq) + " is longer than the model's context (" +
                    std::to_string(config.max_seq_len) + " for " + config.describe() + ")");
    if (!opt.resume.empty() && start.m.empty())
        throw Error("--resume " + opt.resume + ": checkpoint has no optimizer state (use --init to start from it)");

    // The processes training together (one, before stage 06): each reads its own windows.
    typename Ops<S>::Parallel parallel;
    const int rank = parallel.rank(), world = parallel.world();
    const int micro_batches = micro_batches_per_step(opt, world);
    const long long step_tokens = static_cast<long long>(opt.batch) * opt.seq * micro_batches * world;
    check_memory<S>(config, opt.batch, opt.seq, micro_batches);  // refuse what cannot fit, before any work

    // Data: fail on bad shards before allocating the model.
    DataLoader train_data(find_shards(opt.data_dir, "train"), opt.batch, opt.seq, rank, world, config.vocab_size);
    std::unique_ptr<DataLoader> val_data;
    if (opt.val_every > 0)
        val_data = std::make_unique<DataLoader>(find_shards(opt.data_dir, "val"), opt.batch, opt.seq, rank, world,
                                                config.vocab_size);
    std::unique_ptr<Tokenizer> tokenizer;
    if (opt.sample_every > 0) {
        try {
            tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(opt.tokenizer_dir));
        } catch (const MissingFile& e) {  // a tokenizer that is there but broken is an error
            std::printf("warning: %s; samples will be printed as token ids\n", e.what());
        }
    }

    GPT<S> model(config, opt.batch, opt.seq, micro_batches, &parallel);
    int first_step = 0;
    if (!ckpt_path.empty()) {
        model.set_parameters(start.params);
        if (!opt.resume.empty()) {
            model.set_optimizer_state(start.m, start.v);
            first_step = start.step;
        }
    } else {
        model.set_parameters(init_parameters(config, opt.seed));
    }

    // MFU of this device: the FLOPs of the tokens it processes in a step.
    const double flops_per_step = flops_per_token(config, opt.seq) * double(step_tokens) / world;
    const double peak = S::peak_flops();
    std::printf("stage      %s: %s\n", S::name, S::description);
    std::printf("%s", describe_policy<S>().c_str());
    std::printf("device     %s\n", S::device_description().c_str());
    std::printf("model      %s, %zu parameters%s\n", config.describe().c_str(), ParamLayout(config).total(),
                ckpt_path.empty() ? "" : (" from " + ckpt_path).c_str());
    std::printf("data       %s: %lld train tokens%s\n", opt.data_dir.c_str(),
                static_cast<long long>(train_data.total_tokens()),
                val_data ? (", " + std::to_string(val_data->total_tokens()) + " val tokens").c_str() : "");
    std::printf("batch      %d x %d tokens x %d micro-batches x %d processes = %lld tokens/step, %d steps, lr %g "
                "(warmup %d, cosine to %g x)\n",
                opt.batch, opt.seq, micro_batches, world, step_tokens, opt.steps, opt.lr, opt.warmup, opt.min_lr_frac);
    std::fflush(stdout);

    // The start event also carries what a benchmark needs to compute MFU for any run on this
    // device (tests/bench/ladder.py): the model's sizes and parameter count, the FLOPs per
    // token at this T, and the peak it divides by (null where unknown, as on the CPU).
    auto number = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.17g", v);  // every digit: the reader gets this double back
        return std::string(buf);
    };
    const std::string peak_match = S::peak_flops_match();
    Logger log(opt.log);
    log.event("start", "\"stage\": " + Logger::json_string(S::name) +
                           ", \"device\": " + Logger::json_string(S::device_description()) +
                           ", \"model\": " + Logger::json_string(config.describe()) +
                           ", \"batch\": " + std::to_string(opt.batch) + ", \"seq\": " + std::to_string(opt.seq) +
                           ", \"micro_batches\": " + std::to_string(micro_batches) +
                           ", \"world\": " + std::to_string(world) +
                           ", \"config\": {\"max_seq_len\": " + std::to_string(config.max_seq_len) +
                           ", \"vocab_size\": " + std::to_string(config.vocab_size) +
                           ", \"n_layer\": " + std::to_string(config.n_layer) +
                           ", \"n_head\": " + std::to_string(config.n_head) +
                           ", \"n_embd\": " + std::to_string(config.n_embd) + "}" +
                           ", \"params\": " + std::to_string(ParamLayout(config).total()) +
                           ", \"flops_per_token\": " + number(flops_per_token(config, opt.seq)) +
                           ", \"peak_flops\": " + (peak > 0 ? number(peak) : "null") +
                           ", \"peak_match\": " + (peak_match.empty() ? "null" : Logger::json_string(peak_match)));
    Rng sample_rng(opt.seed + 1);
    std::vector<double> step_ms;

    auto save = [&](int steps_taken) {
        Checkpoint c;
        c.config = config;
        c.step = steps_taken;
        c.params = model.parameters();
        c.m = model.optimizer_m();
        c.v = model.optimizer_v();
        save_checkpoint(opt.save, c);
        std::printf("saved      %s (step %d)\n", opt.save.c_str(), steps_taken);
    };

    // Each position's loss weighs 1 / (all positions of the step): the gradient is that of the
    // step's mean loss, whatever the number of micro-batches and processes.
    const float loss_scale = static_cast<float>(1.0 / double(step_tokens));
    std::vector<Batch> batches(micro_batches);
    for (int step = first_step; step < opt.steps; ++step) {
        const bool last = step + 1 == opt.steps;
        const float lr = learning_rate(step, opt.steps, opt.warmup, opt.lr, opt.min_lr_frac);

        const auto t0 = std::chrono::steady_clock::now();
        for (Batch& b : batches) b = train_data.next();
        // The step's work is queued on the device; train_step() waits for it once, at its end.
        const StepResult result =
            model.train_step(batches, opt.batch, opt.seq, loss_scale, opt.adamw, lr, step + 1);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!std::isfinite(result.loss))
            throw Error("loss is " + std::to_string(result.loss) + " at step " + std::to_string(step + 1) +
                        " (diverged: try a lower --lr)");
        if (step > first_step) step_ms.push_back(ms);  // the first step includes warm-up costs

        StepRecord r;
        r.step = step;
        r.steps = opt.steps;
        r.loss = result.loss;
        r.lr = lr;
        r.grad_norm = result.grad_norm;
        r.ms = ms;
        r.tokens_per_s = step_tokens / (ms / 1000.0);
        r.mfu = peak > 0 ? flops_per_step / (ms / 1000.0) / peak : -1.0;
        log.step(r);

        if (val_data && ((step + 1) % opt.val_every == 0 || last))
            log.validation(step, validation_loss(model, *val_data, opt.val_batches));
        if (opt.sample_every > 0 && ((step + 1) % opt.sample_every == 0 || last))
            log.sample(step, generate(model, tokenizer.get(), opt.sample_tokens, opt.temperature, opt.top_k,
                                      sample_rng));
        if (!opt.save.empty() && ((opt.save_every > 0 && (step + 1) % opt.save_every == 0) || last))
            save(step + 1);
    }

    if (!step_ms.empty()) {
        const double ms = median(step_ms);
        const double tps = step_tokens / (ms / 1000.0);
        char mfu[32] = "n/a";
        if (peak > 0) std::snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * flops_per_step / (ms / 1000.0) / peak);
        std::printf("summary    median %.1f ms/step, %.0f tokens/s, MFU %s, peak memory %.2f GiB\n", ms, tps, mfu,
                    S::peak_memory_bytes() / 1073741824.0);
        log.event("summary", "\"median_ms\": " + std::to_string(ms) + ", \"tokens_per_s\": " + std::to_string(tps) +
                                 ", \"peak_memory_bytes\": " + std::to_string(S::peak_memory_bytes()));
    }
    return 0;
}

}  // namespace gpt
