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
#include "train/options.h"
#include "train/sampler.h"
#include "train/schedule.h"
#include "util/error.h"

namespace gpt {

inline double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class S>
float validation_loss(GPT<S>& model, DataLoader& val, int batches) {
    val.reset();
    double sum = 0.0;
    for (int i = 0; i < batches; ++i) {
        const Batch b = val.next();
        sum += model.forward(b.inputs.data(), b.targets.data(), val.B(), val.T());
    }
    return static_cast<float>(sum / batches);
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

    // Data: fail on bad shards before allocating the model.
    DataLoader train_data(find_shards(opt.data_dir, "train"), opt.batch, opt.seq, 0, 1, config.vocab_size);
    std::unique_ptr<DataLoader> val_data;
    if (opt.val_every > 0)
        val_data = std::make_unique<DataLoader>(find_shards(opt.data_dir, "val"), opt.batch, opt.seq, 0, 1,
                                                config.vocab_size);
    std::unique_ptr<Tokenizer> tokenizer;
    if (opt.sample_every > 0) {
        try {
            tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(opt.tokenizer_dir));
        } catch (const Error& e) {
            std::printf("warning: %s; samples will be printed as token ids\n", e.what());
        }
    }

    GPT<S> model(config, opt.batch, opt.seq);
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

    const double flops_per_step = flops_per_token(config, opt.seq) * opt.batch * opt.seq;
    const double peak = S::peak_flops();
    std::printf("stage      %s: %s\n", S::name, S::description);
    std::printf("device     %s\n", S::device_description().c_str());
    std::printf("model      %s, %zu parameters%s\n", config.describe().c_str(), ParamLayout(config).total(),
                ckpt_path.empty() ? "" : (" from " + ckpt_path).c_str());
    std::printf("data       %s: %lld train tokens%s\n", opt.data_dir.c_str(),
                static_cast<long long>(train_data.total_tokens()),
                val_data ? (", " + std::to_string(val_data->total_tokens()) + " val tokens").c_str() : "");
    std::printf("batch      %d x %d = %d tokens/step, %d steps, lr %g (warmup %d, cosine to %g x)\n", opt.batch,
                opt.seq, opt.batch * opt.seq, opt.steps, opt.lr, opt.warmup, opt.min_lr_frac);
    std::fflush(stdout);

    Logger log(opt.log);
    log.event("start", "\"stage\": " + Logger::json_string(S::name) +
                           ", \"device\": " + Logger::json_string(S::device_description()) +
                           ", \"model\": " + Logger::json_string(config.describe()) +
                           ", \"batch\": " + std::to_string(opt.batch) + ", \"seq\": " + std::to_string(opt.seq));
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

    for (int step = first_step; step < opt.steps; ++step) {
        const bool last = step + 1 == opt.steps;
        const Batch batch = train_data.next();
        const float lr = learning_rate(step, opt.steps, opt.warmup, opt.lr, opt.min_lr_frac);

        const auto t0 = std::chrono::steady_clock::now();
        const float loss = model.forward(batch.inputs.data(), batch.targets.data(), opt.batch, opt.seq);
        if (!std::isfinite(loss))
            throw Error("loss is " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                        " (diverged: try a lower --lr)");
        model.backward();
        const float norm = model.update(opt.adamw, lr, step + 1);
        model.synchronize();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (step > first_step) step_ms.push_back(ms);  // the first step includes warm-up costs

        StepRecord r;
        r.step = step;
        r.steps = opt.steps;
        r.loss = loss;
        r.lr = lr;
        r.grad_norm = norm;
        r.ms = ms;
        r.tokens_per_s = opt.batch * opt.seq / (ms / 1000.0);
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
        const double tps = opt.batch * opt.seq / (ms / 1000.0);
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
