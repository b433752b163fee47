#include "train/options.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "model/config.h"
#include "util/cli.h"
#include "util/error.h"

namespace gpt {

TrainOptions default_options(bool gpu) {
    TrainOptions o;
    const std::string data = GPT_DATA_DIR;
    o.data_dir = data + "/brown";
    o.tokenizer_dir = data + "/gpt2";
    if (!gpu) {
        // Small enough to see the loss fall and a sample within two minutes on two cores.
        o.model = "tiny";
        o.batch = 8;
        o.seq = 64;
        o.steps = 200;
        o.lr = 3e-3f;
        o.warmup = 10;
        o.val_every = 50;
        o.val_batches = 4;
        o.sample_every = 100;
        o.sample_tokens = 48;
        // A CPU step can take anything from milliseconds to hours: no limit unless asked.
        o.step_timeout = 0;
    }
    return o;
}

namespace {

// The table of options, bound to the fields of `o`: parsing writes into it, --help reads it.
std::vector<cli::Option> option_table(TrainOptions& o) {
    using cli::above;
    using cli::at_least;
    using cli::at_most;
    using cli::below;
    using cli::real;
    using cli::text;
    using cli::whole;
    AdamWSettings& a = o.adamw;
    return {
        text("--model", "NAME", "model size: micro, tiny, d12 (GPT-2 124M), d24, d36, d48 (docs/formats.md)", o.model,
             [](const std::string& v) { config_by_name(v); }),
        text("--data", "DIR", "token shards: DIR/*_train_*.bin and DIR/*_val_*.bin", o.data_dir),
        text("--tokenizer", "DIR", "GPT-2 tokenizer files (encoder.json, vocab.bpe), for text samples",
             o.tokenizer_dir),
        text("--init", "PATH",
             "start from the parameters of a checkpoint, an llm.c model file (gpt2_124M.bin) or a Hugging Face "
             "GPT-2 (model.safetensors, or its directory), e.g. GPT-2's released weights; its config replaces --model",
             o.init),
        text("--resume", "PATH",
             "continue a run exactly where a trainer's checkpoint stopped (weights, optimizer, data position, "
             "sampling; B, T and seed must match)",
             o.resume),
        whole("--batch", "B",
              "sequences per micro-batch; when not given and the default does not fit the GPU's memory, the "
              "batch is split into the fewest micro-batches that fit, with the same tokens per step",
              o.batch, 1),
        whole("--seq", "T", "tokens per sequence (at most the model's context)", o.seq, 1),
        whole("--total-batch", "TOKENS",
              "tokens per optimizer step, accumulated over micro-batches (a multiple of B x T x processes; "
              "0: one micro-batch)",
              o.total_batch, 0),
        whole("--zero", "STAGE",
              "with several processes: 0 = each keeps the whole optimizer state, 1 = ZeRO-1, each keeps and "
              "updates 1/processes of it",
              o.zero, 0, 1),
        real("--step-timeout", "SECONDS",
             "with several processes (and stage 06): stop every process when a step takes longer, as a process "
             "that hangs would make it (0: no limit)",
             o.step_timeout, at_least(0)),
        whole("--steps", "N", "optimizer steps of the whole run (the schedule's length)", o.steps, 1),
        whole("--stop-after", "K",
              "stop after step K, saving a checkpoint (needs --save); --resume it to go on (0: run all --steps)",
              o.stop_after, 0),
        real("--lr", "LR", "peak learning rate", o.lr, at_least(0)),
        real("--min-lr-frac", "F", "final learning rate as a fraction of the peak (cosine decay)", o.min_lr_frac,
             at_least(0), at_most(1)),
        whole("--warmup", "N", "linear warmup steps", o.warmup, 0),
        real("--weight-decay", "WD", "AdamW weight decay (matrices and embeddings only)", a.weight_decay,
             at_least(0)),
        real("--beta1", "B1", "AdamW beta1, in [0, 1)", a.beta1, at_least(0), below(1)),
        real("--beta2", "B2", "AdamW beta2, in [0, 1)", a.beta2, at_least(0), below(1)),
        real("--eps", "EPS", "AdamW epsilon, above 0", a.eps, above(0)),
        real("--grad-clip", "G", "clip the global gradient norm to G (0: off)", a.grad_clip, at_least(0)),
        whole("--seed", "S", "seed of the initialisation and of sampling (a whole number)", o.seed, 0),
        whole("--val-every", "N", "validation loss every N steps and at the end (0: never)", o.val_every, 0),
        whole("--val-batches", "N", "batches per validation", o.val_batches, 1),
        text("--eval", "FILE",
             "HellaSwag accuracy on FILE, llm.c's hellaswag_val.bin or HellaSwag's JSON Lines (docs/formats.md): "
             "with --eval-every during training, else of the --init weights alone, without training",
             o.eval_file),
        whole("--eval-every", "N", "with --eval: HellaSwag every N steps and at the end (0: no training, only the "
              "evaluation)", o.eval_every, 0),
        whole("--eval-examples", "N", "with --eval: the first N examples only (0: all)", o.eval_examples, 0),
        whole("--sample-every", "N", "print generated text every N steps and at the end (0: never)",
              o.sample_every, 0),
        whole("--sample-tokens", "N", "tokens per sample", o.sample_tokens, 1),
        text("--prompt", "TEXT",
             "do not train: print a continuation of TEXT (--sample-tokens long) from --init's weights",
             o.prompt, [](const std::string& v) {
                 if (v.empty()) throw Error("the prompt is empty: give the text to continue");
             }),
        real("--temperature", "X", "sampling temperature, above 0", o.temperature, above(0)),
        whole("--top-k", "K", "sample among the K most likely tokens (0: all)", o.top_k, 0),
        text("--save", "PATH", "write a checkpoint (with optimizer state) at the end", o.save),
        whole("--save-every", "N", "also write it every N steps (0: only at the end)", o.save_every, 0),
        text("--log", "PATH", "also write every step, validation and sample as JSON Lines", o.log),
        cli::flag("--profile",
                  "time one step after the warm-up op by op: a table of each op's time, bytes, FLOPs and share of "
                  "this GPU's ceilings; with --log run.jsonl also run.profile.json and its figure run.profile.svg",
                  o.profile),
        // More threads than this is a typo, not a machine.
        whole("--threads", "N", "CPU threads (0: all cores)", o.threads, 0, 1024),
    };
}

// The command line on top of `o`, recording what was given.
bool parse_onto(TrainOptions& o, int argc, char** argv) {
    std::vector<cli::Option> table = option_table(o);
    for (cli::Option& option : table)
        option.set = [set = option.set, &o, name = option.name](const std::string& v) {
            set(v);
            o.given_options.insert(name);
            if (name == "--batch") o.batch_given = true;
        };
    return cli::parse(argc, argv, table, false).help;
}

// Every digit a float or double needs to come back as the same value.
std::string exact(double v, bool single) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), single ? "%.9g" : "%.17g", v);
    return buf;
}

// The carried options that decide what each step computes: an option given again with another
// value makes it another run from there on.
bool changes_the_steps(const std::string& name) {
    for (const char* n : {"--batch", "--seq", "--total-batch", "--steps", "--lr", "--min-lr-frac", "--warmup",
                          "--weight-decay", "--beta1", "--beta2", "--eps", "--grad-clip", "--seed", "--data"})
        if (name == n) return true;
    return false;
}

void check_combinations(const TrainOptions& o) {
    if (!o.init.empty() && !o.resume.empty()) throw Error("options --init and --resume exclude each other");
    if (o.eval_file.empty() && o.eval_every > 0)
        throw Error("--eval-every " + std::to_string(o.eval_every) + " needs --eval FILE, the HellaSwag examples");
    if (o.profile && (!o.prompt.empty() || (!o.eval_file.empty() && o.eval_every == 0)))
        throw Error("--profile times a training step; " +
                    std::string(o.prompt.empty() ? "--eval without --eval-every" : "--prompt") + " does not train");
    if (!o.eval_file.empty() && !o.prompt.empty())
        throw Error("options --eval and --prompt exclude each other: each runs the model without training");
}

}  // namespace

OptionValues carried_options(const TrainOptions& o) {
    const AdamWSettings& a = o.adamw;
    const auto n = [](long long v) { return std::to_string(v); };
    const auto f = [](float v) { return exact(v, true); };
    OptionValues values = {
        {"--data", o.data_dir},
        {"--tokenizer", o.tokenizer_dir},
        {"--batch", n(o.batch)},
        {"--seq", n(o.seq)},
        {"--total-batch", n(o.total_batch)},
        {"--zero", n(o.zero)},
        {"--step-timeout", exact(o.step_timeout, false)},
        {"--steps", n(o.steps)},
        {"--lr", f(o.lr)},
        {"--min-lr-frac", f(o.min_lr_frac)},
        {"--warmup", n(o.warmup)},
        {"--weight-decay", f(a.weight_decay)},
        {"--beta1", f(a.beta1)},
        {"--beta2", f(a.beta2)},
        {"--eps", f(a.eps)},
        {"--grad-clip", f(a.grad_clip)},
        {"--seed", std::to_string(o.seed)},
        {"--val-every", n(o.val_every)},
        {"--val-batches", n(o.val_batches)},
        {"--eval", o.eval_file},
        {"--eval-every", n(o.eval_every)},
        {"--eval-examples", n(o.eval_examples)},
        {"--sample-every", n(o.sample_every)},
        {"--sample-tokens", n(o.sample_tokens)},
        {"--temperature", f(o.temperature)},
        {"--top-k", n(o.top_k)},
        {"--save", o.save},
        {"--save-every", n(o.save_every)},
        {"--log", o.log},
    };
    // An empty text option is "not given" (no --eval, no --log): carried as absent.
    values.erase(std::remove_if(values.begin(), values.end(), [](const auto& v) { return v.second.empty(); }),
                 values.end());
    return values;
}

TrainOptions resume_options(int argc, char** argv, const TrainOptions& defaults, const RunState& saved) {
    OptionValues carried = saved.options;
    if (carried.empty()) {  // version 2: what its header holds
        const auto n = [](long long v) { return std::to_string(v); };
        const auto f = [](float v) { return exact(v, true); };
        carried = {{"--batch", n(saved.batch)},
                   {"--seq", n(saved.seq)},
                   {"--total-batch", n((long long)saved.batch * saved.seq * saved.micro_batches * saved.world)},
                   {"--steps", n(saved.steps)},
                   {"--warmup", n(saved.warmup)},
                   {"--lr", f(saved.lr)},
                   {"--min-lr-frac", f(saved.min_lr_frac)},
                   {"--weight-decay", f(saved.weight_decay)},
                   {"--beta1", f(saved.beta1)},
                   {"--beta2", f(saved.beta2)},
                   {"--eps", f(saved.eps)},
                   {"--grad-clip", f(saved.grad_clip)},
                   {"--seed", std::to_string(saved.seed)}};
    }
    TrainOptions o = defaults;
    {
        std::vector<cli::Option> table = option_table(o);
        for (const auto& [name, value] : carried) {
            const auto option = std::find_if(table.begin(), table.end(), [&](const cli::Option& t) {
                return t.name == name && !t.flag;
            });
            if (option == table.end())
                throw Error("the checkpoint's run has option " + name + ", which this trainer does not take");
            try {
                option->set(value);
            } catch (const Error& e) {
                throw Error(std::string("the checkpoint's run: ") + e.what());
            }
        }
    }
    // The saved run's batch is the one it ran with: never split again to fit the memory.
    o.batch_given = true;
    const TrainOptions saved_options = o;
    parse_onto(o, argc, argv);
    const OptionValues now = carried_options(o);
    const auto value_in = [](const OptionValues& values, const std::string& name) {
        for (const auto& [n, v] : values)
            if (n == name) return v;
        return std::string("none");
    };
    const OptionValues before = carried_options(saved_options);
    for (const std::string& name : o.given_options) {
        const std::string was = value_in(before, name), is = value_in(now, name);
        if (was == is || (was == "none" && is == "none")) continue;
        o.notes.push_back(name + " " + is + " (given) where the saved run had " + was +
                        (changes_the_steps(name) ? ": from here on it is another run" : ""));
    }
    check_combinations(o);
    return o;
}


TrainOptions parse_options(int argc, char** argv, const TrainOptions& defaults, bool& help) {
    TrainOptions o = defaults;
    help = parse_onto(o, argc, argv);
    if (help) return o;
    if (!o.init.empty() && !o.resume.empty()) throw Error("options --init and --resume exclude each other");
    // A resumed run's combinations include the options its checkpoint carries (resume_options).
    if (o.resume.empty()) check_combinations(o);
    return o;
}

std::string usage(const char* program, const TrainOptions& defaults, const std::string& title) {
    TrainOptions shown = defaults;
    return title + "\n\nusage: " + program + " [options]\n\noptions (default in brackets):\n" +
           cli::describe(option_table(shown));
}

}  // namespace gpt
