#include "train/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <type_traits>
#include <vector>

#include "model/config.h"
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
    }
    return o;
}

namespace {

struct Option {
    const char* name;
    const char* metavar;  // nullptr: a flag without a value
    const char* help;
    std::function<void(TrainOptions&, const std::string&)> set;
    std::function<std::string(const TrainOptions&)> show;
};

int to_int(const std::string& opt, const std::string& s, int min_value) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < min_value || v > 2147483647L)
        throw Error("option " + opt + ": '" + s + "' is not a whole number >= " + std::to_string(min_value));
    return static_cast<int>(v);
}

float to_float(const std::string& opt, const std::string& s, float min_value) {
    char* end = nullptr;
    errno = 0;
    const float v = std::strtof(s.c_str(), &end);
    if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < min_value)
        throw Error("option " + opt + ": '" + s + "' is not a number >= " + std::to_string(min_value));
    return v;
}

std::string fmt(float v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

std::string or_none(const std::string& s) { return s.empty() ? "none" : s; }

// The field an option sets: a member of TrainOptions, or of its AdamW settings.
template <class T>
T& field_of(TrainOptions& o, T TrainOptions::*member) {
    return o.*member;
}
template <class T>
T& field_of(TrainOptions& o, T AdamWSettings::*member) {
    return o.adamw.*member;
}

// An option that sets a number, at least `min`.
template <class Member>
Option number(const char* name, const char* metavar, const char* help, Member member, double min) {
    return {name, metavar, help,
            [=](TrainOptions& o, const std::string& v) {
                auto& field = field_of(o, member);
                using T = std::decay_t<decltype(field)>;
                if constexpr (std::is_integral_v<T>) field = static_cast<T>(to_int(name, v, static_cast<int>(min)));
                else field = to_float(name, v, static_cast<float>(min));
            },
            [=](const TrainOptions& o) {
                const auto field = field_of(const_cast<TrainOptions&>(o), member);  // read only
                if constexpr (std::is_integral_v<decltype(field)>) return std::to_string(field);
                else return fmt(field);
            }};
}

// An option that sets a path or name ("none" when unset).
Option text(const char* name, const char* metavar, const char* help, std::string TrainOptions::*member) {
    return {name, metavar, help, [=](TrainOptions& o, const std::string& v) { o.*member = v; },
            [=](const TrainOptions& o) { return or_none(o.*member); }};
}

const std::vector<Option>& options() {
    using O = TrainOptions;
    using A = AdamWSettings;
    static const std::vector<Option> kOptions = {
        {"--model", "NAME", "model size: micro, tiny, d12 (GPT-2 124M), d24, d36, d48 (docs/formats.md)",
         [](O& o, const std::string& v) { config_by_name(v); o.model = v; }, [](const O& o) { return o.model; }},
        text("--data", "DIR", "token shards: DIR/*_train_*.bin and DIR/*_val_*.bin", &O::data_dir),
        text("--tokenizer", "DIR", "GPT-2 tokenizer files (encoder.json, vocab.bpe), for text samples",
             &O::tokenizer_dir),
        text("--init", "PATH", "start from this checkpoint's parameters (its config replaces --model)", &O::init),
        text("--resume", "PATH",
             "continue a run exactly where a trainer's checkpoint stopped (weights, optimizer, data position, "
             "sampling; B, T and seed must match)",
             &O::resume),
        number("--batch", "B", "sequences per micro-batch", &O::batch, 1),
        number("--seq", "T", "tokens per sequence (at most the model's context)", &O::seq, 1),
        number("--total-batch", "TOKENS",
               "tokens per optimizer step, accumulated over micro-batches (a multiple of B x T x processes; "
               "0: one micro-batch)",
               &O::total_batch, 0),
        number("--steps", "N", "optimizer steps of the whole run (the schedule's length)", &O::steps, 1),
        number("--stop-after", "K",
               "stop after step K, saving a checkpoint (needs --save); --resume it to go on (0: run all --steps)",
               &O::stop_after, 0),
        number("--lr", "LR", "peak learning rate", &O::lr, 0),
        number("--min-lr-frac", "F", "final learning rate as a fraction of the peak (cosine decay)", &O::min_lr_frac,
               0),
        number("--warmup", "N", "linear warmup steps", &O::warmup, 0),
        number("--weight-decay", "WD", "AdamW weight decay (matrices and embeddings only)", &A::weight_decay, 0),
        number("--beta1", "B1", "AdamW beta1", &A::beta1, 0),
        number("--beta2", "B2", "AdamW beta2", &A::beta2, 0),
        number("--eps", "EPS", "AdamW epsilon", &A::eps, 0),
        number("--grad-clip", "G", "clip the global gradient norm to G (0: off)", &A::grad_clip, 0),
        number("--seed", "S", "seed of the initialisation and of sampling", &O::seed, 0),
        number("--val-every", "N", "validation loss every N steps and at the end (0: never)", &O::val_every, 0),
        number("--val-batches", "N", "batches per validation", &O::val_batches, 1),
        number("--sample-every", "N", "print generated text every N steps and at the end (0: never)",
               &O::sample_every, 0),
        number("--sample-tokens", "N", "tokens per sample", &O::sample_tokens, 1),
        number("--temperature", "X", "sampling temperature", &O::temperature, 1e-3),
        number("--top-k", "K", "sample among the K most likely tokens (0: all)", &O::top_k, 0),
        text("--save", "PATH", "write a checkpoint (with optimizer state) at the end", &O::save),
        number("--save-every", "N", "also write it every N steps (0: only at the end)", &O::save_every, 0),
        text("--log", "PATH", "also write every step, validation and sample as JSON Lines", &O::log),
        number("--threads", "N", "CPU threads (0: all cores)", &O::threads, 0),
    };
    return kOptions;
}

}  // namespace

TrainOptions parse_options(int argc, char** argv, const TrainOptions& defaults, bool& help) {
    TrainOptions o = defaults;
    help = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            help = true;
            return o;
        }
        std::string value;
        bool has_value = false;
        if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        const Option* found = nullptr;
        for (const auto& opt : options())
            if (arg == opt.name) found = &opt;
        if (!found) throw Error("unknown option '" + arg + "' (see --help)");
        if (!has_value) {
            if (i + 1 >= argc) throw Error("option " + arg + " needs a value (" + found->metavar + ")");
            value = argv[++i];
        }
        found->set(o, value);
    }
    if (!o.init.empty() && !o.resume.empty()) throw Error("options --init and --resume exclude each other");
    return o;
}

std::string usage(const char* program, const TrainOptions& defaults, const std::string& title) {
    std::ostringstream s;
    s << title << "\n\nusage: " << program << " [options]\n\noptions (default in brackets):\n";
    for (const auto& opt : options()) {
        std::string left = std::string("  ") + opt.name + " " + opt.metavar;
        if (left.size() < 26) left.resize(26, ' ');
        else left += "\n" + std::string(26, ' ');
        s << left << opt.help << " [" << opt.show(defaults) << "]\n";
    }
    s << "  --help                  this text\n";
    return s.str();
}

}  // namespace gpt
