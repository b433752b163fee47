#include "train/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>
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

const std::vector<Option>& options() {
    static const std::vector<Option> kOptions = {
        {"--model", "NAME", "model size: micro, tiny, d12 (GPT-2 124M), d24, d36, d48 (docs/formats.md)",
         [](TrainOptions& o, const std::string& v) { config_by_name(v); o.model = v; },
         [](const TrainOptions& o) { return o.model; }},
        {"--data", "DIR", "token shards: DIR/*_train_*.bin and DIR/*_val_*.bin",
         [](TrainOptions& o, const std::string& v) { o.data_dir = v; },
         [](const TrainOptions& o) { return o.data_dir; }},
        {"--tokenizer", "DIR", "GPT-2 tokenizer files (encoder.json, vocab.bpe), for text samples",
         [](TrainOptions& o, const std::string& v) { o.tokenizer_dir = v; },
         [](const TrainOptions& o) { return o.tokenizer_dir; }},
        {"--init", "PATH", "start from this checkpoint's parameters (its config replaces --model)",
         [](TrainOptions& o, const std::string& v) { o.init = v; },
         [](const TrainOptions& o) { return or_none(o.init); }},
        {"--resume", "PATH", "continue a run from a checkpoint with optimizer state",
         [](TrainOptions& o, const std::string& v) { o.resume = v; },
         [](const TrainOptions& o) { return or_none(o.resume); }},
        {"--batch", "B", "sequences per step",
         [](TrainOptions& o, const std::string& v) { o.batch = to_int("--batch", v, 1); },
         [](const TrainOptions& o) { return std::to_string(o.batch); }},
        {"--seq", "T", "tokens per sequence (at most the model's context)",
         [](TrainOptions& o, const std::string& v) { o.seq = to_int("--seq", v, 1); },
         [](const TrainOptions& o) { return std::to_string(o.seq); }},
        {"--steps", "N", "optimizer steps",
         [](TrainOptions& o, const std::string& v) { o.steps = to_int("--steps", v, 1); },
         [](const TrainOptions& o) { return std::to_string(o.steps); }},
        {"--lr", "LR", "peak learning rate",
         [](TrainOptions& o, const std::string& v) { o.lr = to_float("--lr", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.lr); }},
        {"--min-lr-frac", "F", "final learning rate as a fraction of the peak (cosine decay)",
         [](TrainOptions& o, const std::string& v) { o.min_lr_frac = to_float("--min-lr-frac", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.min_lr_frac); }},
        {"--warmup", "N", "linear warmup steps",
         [](TrainOptions& o, const std::string& v) { o.warmup = to_int("--warmup", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.warmup); }},
        {"--weight-decay", "WD", "AdamW weight decay (matrices and embeddings only)",
         [](TrainOptions& o, const std::string& v) { o.adamw.weight_decay = to_float("--weight-decay", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.adamw.weight_decay); }},
        {"--beta1", "B1", "AdamW beta1",
         [](TrainOptions& o, const std::string& v) { o.adamw.beta1 = to_float("--beta1", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.adamw.beta1); }},
        {"--beta2", "B2", "AdamW beta2",
         [](TrainOptions& o, const std::string& v) { o.adamw.beta2 = to_float("--beta2", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.adamw.beta2); }},
        {"--eps", "EPS", "AdamW epsilon",
         [](TrainOptions& o, const std::string& v) { o.adamw.eps = to_float("--eps", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.adamw.eps); }},
        {"--grad-clip", "G", "clip the global gradient norm to G (0: off)",
         [](TrainOptions& o, const std::string& v) { o.adamw.grad_clip = to_float("--grad-clip", v, 0.0f); },
         [](const TrainOptions& o) { return fmt(o.adamw.grad_clip); }},
        {"--seed", "S", "seed of the initialisation and of sampling",
         [](TrainOptions& o, const std::string& v) { o.seed = static_cast<uint64_t>(to_int("--seed", v, 0)); },
         [](const TrainOptions& o) { return std::to_string(o.seed); }},
        {"--val-every", "N", "validation loss every N steps and at the end (0: never)",
         [](TrainOptions& o, const std::string& v) { o.val_every = to_int("--val-every", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.val_every); }},
        {"--val-batches", "N", "batches per validation",
         [](TrainOptions& o, const std::string& v) { o.val_batches = to_int("--val-batches", v, 1); },
         [](const TrainOptions& o) { return std::to_string(o.val_batches); }},
        {"--sample-every", "N", "print generated text every N steps and at the end (0: never)",
         [](TrainOptions& o, const std::string& v) { o.sample_every = to_int("--sample-every", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.sample_every); }},
        {"--sample-tokens", "N", "tokens per sample",
         [](TrainOptions& o, const std::string& v) { o.sample_tokens = to_int("--sample-tokens", v, 1); },
         [](const TrainOptions& o) { return std::to_string(o.sample_tokens); }},
        {"--temperature", "X", "sampling temperature",
         [](TrainOptions& o, const std::string& v) { o.temperature = to_float("--temperature", v, 1e-3f); },
         [](const TrainOptions& o) { return fmt(o.temperature); }},
        {"--top-k", "K", "sample among the K most likely tokens (0: all)",
         [](TrainOptions& o, const std::string& v) { o.top_k = to_int("--top-k", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.top_k); }},
        {"--save", "PATH", "write a checkpoint (with optimizer state) at the end",
         [](TrainOptions& o, const std::string& v) { o.save = v; },
         [](const TrainOptions& o) { return or_none(o.save); }},
        {"--save-every", "N", "also write it every N steps (0: only at the end)",
         [](TrainOptions& o, const std::string& v) { o.save_every = to_int("--save-every", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.save_every); }},
        {"--log", "PATH", "also write every step, validation and sample as JSON Lines",
         [](TrainOptions& o, const std::string& v) { o.log = v; },
         [](const TrainOptions& o) { return or_none(o.log); }},
        {"--threads", "N", "CPU threads (0: all cores)",
         [](TrainOptions& o, const std::string& v) { o.threads = to_int("--threads", v, 0); },
         [](const TrainOptions& o) { return std::to_string(o.threads); }},
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
