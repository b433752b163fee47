// Command-line options of every trainer. Defaults differ between the CPU reference and the GPU
// stages (see default_options); --help prints the defaults of the binary it belongs to.
#pragma once
#include <cstdint>
#include <string>

#include "train/optimizer.h"

namespace gpt {

struct TrainOptions {
    // model and data
    std::string model = "d12";
    std::string data_dir;       // default: <repo>/data/brown
    std::string tokenizer_dir;  // default: <repo>/data/gpt2
    std::string init;           // start from a checkpoint's parameters
    std::string resume;         // continue a run: parameters, optimizer state and step
    // batch
    int batch = 16;
    bool batch_given = false;  // --batch was given: never split to fit the memory (train/loop.h)
    int seq = 1024;
    long long total_batch = 0;  // tokens per optimizer step (0: one micro-batch, batch x seq x processes)
    int zero = 0;               // ZeRO stage with several processes: 0 or 1 (sharded optimizer state)
    double step_timeout = 600;  // with several processes (and stage 06): seconds a step may take, 0: no limit
    // optimisation
    int steps = 300;
    int stop_after = 0;  // stop (and save) after this many steps of the run; 0: run all --steps
    float lr = 6e-4f;
    float min_lr_frac = 0.1f;
    int warmup = 30;
    AdamWSettings adamw;
    uint64_t seed = 1337;
    // evaluation and output
    int val_every = 50;
    int val_batches = 4;
    std::string eval_file;  // HellaSwag: llm.c's hellaswag_val.bin or the JSON Lines
    int eval_every = 0;     // during training, every N steps and at the end; 0 with --eval: no training
    int eval_examples = 0;  // the first N examples only; 0: all
    int sample_every = 100;
    int sample_tokens = 64;
    std::string prompt;  // not empty: no training; print a continuation of it from --init's weights
    float temperature = 1.0f;
    int top_k = 40;
    std::string save;
    int save_every = 0;
    std::string log;
    bool profile = false;  // one step after the warm-up timed op by op (train/profile.h)
    int threads = 0;  // CPU only: 0 = all cores
};

TrainOptions default_options(bool gpu);

// Parses argv on top of the defaults (with the parser every tool shares, util/cli.h). Sets
// `help` and returns when --help is given; throws gpt::Error naming the option for an unknown
// option or a value outside the option's domain.
TrainOptions parse_options(int argc, char** argv, const TrainOptions& defaults, bool& help);

// The --help text, with the given defaults.
std::string usage(const char* program, const TrainOptions& defaults, const std::string& title);

}  // namespace gpt
