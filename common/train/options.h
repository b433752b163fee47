// Command-line options of every trainer. Defaults differ between the CPU reference and the GPU
// stages (see default_options); --help prints the defaults of the binary it belongs to.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint.h"
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
    std::string program = "./train";  // how the user runs this trainer, for the commands it prints
    std::vector<std::string> notes;     // lines for the run's banner (resume_options)

    // The options given on the command line ("--seq"), whatever their value: a default may
    // follow from the model or the resumed run, a given value never does.
    std::set<std::string> given_options;
    bool given(const std::string& option) const { return given_options.count(option) > 0; }
};

TrainOptions default_options(bool gpu);

// Parses argv on top of the defaults (with the parser every tool shares, util/cli.h). Sets
// `help` and returns when --help is given; throws gpt::Error naming the option for an unknown
// option or a value outside the option's domain.
TrainOptions parse_options(int argc, char** argv, const TrainOptions& defaults, bool& help);

// The options a checkpoint carries, so that `--resume PATH` alone continues the run: every
// option that shapes the run (data, batch, schedule, optimizer, seed, evaluation, samples, where
// it saves and logs), with values written exactly ("%.9g" for a float). Not carried: what is
// decided once (--stop-after, --profile, --init, --prompt) or belongs to the machine (--threads);
// the model comes with the checkpoint's weights.
using OptionValues = std::vector<std::pair<std::string, std::string>>;
OptionValues carried_options(const TrainOptions& o);

// The options of a resumed run: the defaults, then the options the checkpoint carries, then the
// command line. Its `notes` get one line for each option given again with another value than
// the saved run's. `carried` empty (a version 2 checkpoint): its batch, seq, schedule, optimizer and
// seed are taken from `saved`, the numbers its header holds.
TrainOptions resume_options(int argc, char** argv, const TrainOptions& defaults, const RunState& saved);

// The --help text, with the given defaults.
std::string usage(const char* program, const TrainOptions& defaults, const std::string& title);

}  // namespace gpt
