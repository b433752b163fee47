// The one training loop, shared by the CPU reference and every GPU stage.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/params.h"
#include "train/eval_hellaswag.h"
#include "train/gpt.h"
#include "train/logger.h"
#include "train/memory.h"
#include "train/options.h"
#include "train/policy.h"
#include "train/profile.h"
#include "train/processes.h"
#include "train/sampler.h"
#include "train/schedule.h"
#include "train/stop_request.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"
#include "util/rng.h"

namespace gpt {

// Passes over the training data: "4.3", or "0.46" (two digits) below one.
inline std::string epochs_text(double epochs) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), epochs < 1 ? "%.2g" : "%.1f", epochs);
    return buf;
}

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
    const long long micro_batches = opt.total_batch / per_micro;
    if (micro_batches > 2147483647LL)
        throw Error("--total-batch " + std::to_string(opt.total_batch) + " needs " + std::to_string(micro_batches) +
                    " micro-batches per step, more than 2147483647");
    return static_cast<int>(micro_batches);
}

// A run whose batch was not given keeps its tokens per step where the default batch does not fit
// the memory: the batch becomes the fewest micro-batches that fit (gradient accumulation), each
// process splitting alike. Sets opt's batch and total batch, and returns the banner's line about
// it; nothing changes (and "") when the batch fits, or when not even one sequence does (then
// check_memory refuses the run as it stands).
template <class S, class Parallel>
std::string fit_default_batch(TrainOptions& opt, const GPTConfig& config, Parallel& parallel) {
    const int world = parallel.world();
    const int micro_batches = micro_batches_per_step(opt, world);
    uint64_t split = fewest_micro_batches_that_fit<S>(config, opt.batch, opt.seq, micro_batches, &parallel);
    for (const uint64_t k : parallel.gather_values(split)) split = k == 0 || split == 0 ? 0 : std::max(split, k);
    if (split <= 1) return "";
    const int B = opt.batch, k = static_cast<int>(split);
    const auto [one, two] = memory_per_batch<S>(config, opt.seq, micro_batches, &parallel);
    const long long step_tokens = static_cast<long long>(B) * opt.seq * micro_batches * world;
    opt.batch = B / k;
    opt.total_batch = step_tokens;
    return "the default --batch " + std::to_string(B) + " " +
           memory_shortfall(one, two, B, available_memory<S>()) + ": " + std::to_string(k * micro_batches) +
           " micro-batches of " + std::to_string(opt.batch) + (opt.batch == 1 ? " sequence" : " sequences") + " instead, the same " +
           with_commas(step_tokens) + " tokens a step (a --batch you give is never split)";
}

// What a message about non-finite numbers says about their likely cause.
inline std::string divergence_hint(const TrainOptions& opt, const std::string& started_from) {
    char lr[32];
    std::snprintf(lr, sizeof(lr), "%g", opt.lr);
    return std::string("the run diverged: try a lower --lr than ") + lr +
           (started_from.empty() ? "" : ", or check the checkpoint it started from, " + started_from);
}

// The run's part of a checkpoint (the model's is GPT::checkpoint): the settings that shape the run,
// as numbers (check_resume compares them) and as the options --resume takes up again
// (resume_options, train/options.h); where the data loader stands; the sampling generator's state.
inline RunState run_state(const TrainOptions& opt, int micro_batches, int world, const DataLoader& train_data,
                          const Rng& sample_rng) {
    RunState r;
    r.recorded = true;
    r.batch = opt.batch;
    r.seq = opt.seq;
    r.micro_batches = micro_batches;
    r.world = world;
    r.steps = opt.steps;
    r.warmup = opt.warmup;
    r.lr = opt.lr;
    r.min_lr_frac = opt.min_lr_frac;
    r.weight_decay = opt.adamw.weight_decay;
    r.beta1 = opt.adamw.beta1;
    r.beta2 = opt.adamw.beta2;
    r.eps = opt.adamw.eps;
    r.grad_clip = opt.adamw.grad_clip;
    r.seed = opt.seed;
    r.data_tokens = train_data.total_tokens();
    r.data_shard = train_data.position().shard;
    r.data_pos = train_data.position().pos;
    sample_rng.get_state(r.sample_rng);
    r.options = carried_options(opt);
    return r;
}

// The settings a resumed run must share with the run that saved the checkpoint: those that
// decide which tokens each step sees (an error). They come from the checkpoint unless given again
// (resume_options, train/options.h), as do the schedule and optimizer settings, whose change is a
// choice the banner notes: the run is then no longer the same.
// The number of processes may change (a checkpoint holds the whole state, whoever wrote it):
// a step reads the same consecutive windows however they are split into micro-batches and
// processes, as long as the tokens per step stay the same (up to the end of a shard, where the
// tail the loader skips depends on the number of processes: docs/formats.md).
// micro_batches 0: before they are known, B, T and the seed alone.
inline void check_resume(const TrainOptions& opt, const Checkpoint& ck, int micro_batches, int world) {
    const RunState& r = ck.run;
    const std::string where = "--resume " + opt.resume + ": ";
    if (!r.recorded)
        throw Error(where + "the checkpoint records no run to continue (written by gpt_init?); use --init to "
                            "start a new run from its weights");
    auto must_match = [&](const char* option, long long saved, long long now) {
        if (saved != now)
            throw Error(where + "the run was saved with " + option + " " + std::to_string(saved) + ", this one has " +
                        std::to_string(now) + "; resume with the same " + option + " (or --init to start anew)");
    };
    must_match("--batch", r.batch, opt.batch);
    must_match("--seq", r.seq, opt.seq);
    must_match("--seed", static_cast<long long>(r.seed), static_cast<long long>(opt.seed));
    if (micro_batches > 0)
        must_match("tokens per step (--total-batch)", (long long)r.batch * r.seq * r.micro_batches * r.world,
                   (long long)opt.batch * opt.seq * micro_batches * world);
}

// Processes that train together must hold the same weights; a difference (a rank that read
// other data, a reduction that missed a tensor, a wrong seed) would otherwise go unnoticed and
// grow. Step 0: right after the weights were set, before any step.
template <class S, class Parallel>
void check_same_weights(GPT<S>& model, Parallel& parallel, int step) {
    const std::vector<uint64_t> all = parallel.gather_values(model.weights_fingerprint());
    for (size_t r = 1; r < all.size(); ++r)
        if (all[r] != all[0])
            throw Error((step == 0 ? std::string("before the first step") : "after step " + std::to_string(step)) +
                        " the weights of rank " + std::to_string(r) + " differ from rank 0's: the processes " +
                        (step == 0 ? "do not start from the same model" : "no longer train the same model"));
}

// How often processes that train together compare their weights (check_same_weights).
constexpr int kCheckWeightsEvery = 100;

// A failure on purpose, for the tests of what the other processes do then: GPT_TEST_FAIL=R:S
// makes rank R fail as its step S starts, GPT_TEST_FAIL=R:S:hang makes it hang there instead,
// and GPT_TEST_FAIL=R:S:sigint sends it SIGINT there (Ctrl-C at a known step).
struct InjectedFault {
    int rank = -1, step = -1;
    bool hang = false, sigint = false;
};
inline InjectedFault injected_fault(int world) {
    const char* v = std::getenv("GPT_TEST_FAIL");
    InjectedFault f;
    if (!v || !*v) return f;
    const std::string text = v;
    auto whole = [](const std::string& t, int& out) {  // digits only: no sign, no space
        if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos) return false;
        out = std::stoi(t);
        return true;
    };
    const size_t a = text.find(':'), b = text.find(':', a == std::string::npos ? a : a + 1);
    const std::string how = b == std::string::npos ? "" : text.substr(b + 1);
    if (a == std::string::npos || !whole(text.substr(0, a), f.rank) ||
        !whole(text.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1), f.step) || f.step < 1 ||
        (b != std::string::npos && how != "hang" && how != "sigint"))
        throw Error("GPT_TEST_FAIL=" + text + ": expected RANK:STEP, RANK:STEP:hang or RANK:STEP:sigint (a test's "
                    "fault switch)");
    if (f.rank >= world)
        throw Error("GPT_TEST_FAIL=" + text + ": there is no rank " + std::to_string(f.rank) + " among the " +
                    std::to_string(world) + " process(es) of this run");
    f.hang = how == "hang";
    f.sigint = how == "sigint";
    return f;
}

template <class S, class Parallel>
int train_with(TrainOptions opt, Parallel& parallel, std::unique_ptr<GPT<S>>& model_holder);

// The value of `option` in the run a checkpoint carries ("" if it has none).
inline std::string saved_option(const Checkpoint& checkpoint, const std::string& option) {
    for (const auto& [name, value] : checkpoint.run.options)
        if (name == option) return value;
    return "";
}

// Two spellings of one file ("run/s.jsonl", "./run/s.jsonl"), whether it exists yet or not.
inline bool same_file(const std::string& a, const std::string& b) {
    if (a.empty() || b.empty()) return false;
    std::error_code ec1, ec2;
    if (std::filesystem::equivalent(a, b, ec1)) return true;
    const auto ca = std::filesystem::weakly_canonical(a, ec1), cb = std::filesystem::weakly_canonical(b, ec2);
    return !ec1 && !ec2 && ca == cb;
}

// A path as a shell reads it back: quoted only where it needs to be.
inline std::string shell_quoted(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=+:,@%-") ==
                          std::string::npos)
        return s;
    std::string out = "'";
    for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// The command that continues a run saved in `checkpoint`: its options come with it.
inline std::string resume_command(const TrainOptions& opt, const std::string& checkpoint) {
    return shell_quoted(opt.program) + " --resume " + shell_quoted(checkpoint);
}

// Before step 1, the files the run will write against the free space of their file systems, so
// that a full disk refuses the run instead of losing its result at the end. The checkpoint needs
// its whole size even where an older one is replaced (the new file is written beside it first);
// the log, a few hundred bytes a step and a sample's text.
inline void check_free_space(const TrainOptions& opt, const GPTConfig& config, int steps_to_run) {
    struct Output {
        std::string what, path;
        uint64_t bytes;
    };
    std::vector<Output> outputs;
    if (!opt.save.empty()) {
        RunState run;
        run.recorded = true;
        run.options = carried_options(opt);
        outputs.push_back({"--save", opt.save, checkpoint_file_bytes(config, true, run)});
    }
    if (!opt.log.empty()) {
        const uint64_t steps = static_cast<uint64_t>(std::max(0, steps_to_run));
        const auto every = [&](int n) { return n > 0 ? steps / n + 1 : 0; };
        uint64_t bytes = 4096 + steps * 256 + every(opt.val_every) * 64 + every(opt.eval_every) * 160 +
                         every(opt.sample_every) * (uint64_t(opt.sample_tokens) * 24 + 64);
        if (opt.profile) bytes += uint64_t(1) << 20;  // its table and figure
        outputs.push_back({"--log", opt.log, bytes});
    }
    std::vector<std::pair<FreeSpace, std::vector<const Output*>>> systems;
    for (const Output& o : outputs) {
        const FreeSpace space = free_space_for(o.path);
        auto same = std::find_if(systems.begin(), systems.end(),
                                 [&](const auto& sys) { return sys.first.device == space.device; });
        if (same == systems.end()) systems.push_back({space, {&o}});
        else same->second.push_back(&o);
    }
    for (const auto& [space, on_it] : systems) {
        uint64_t needed = 0;
        std::string names;
        for (const Output* o : on_it) {
            needed += o->bytes;
            names += (names.empty() ? "" : " and ") + o->what + " " + o->path + " (" + size_text(o->bytes) + ")";
        }
        if (needed > space.bytes)
            throw Error(names + (on_it.size() > 1 ? " need " : " needs ") + size_text(needed) +
                        ", and its file system has " + size_text(space.bytes) +
                        " free: the run could not keep what it makes; free some space or write elsewhere");
    }
}

// A save that failed (a full disk, a folder removed during the run) must not lose the weights:
// they go to the same file name in the temporary directory ($TMPDIR, else /tmp), or else in the
// current one, with a number added where a file of that name is already there (never replaced).
// Returns what the error adds: where they are and how to go on.
inline std::string keep_elsewhere(const TrainOptions& opt, const Checkpoint& c) {
    namespace fs = std::filesystem;
    const std::string name = fs::path(opt.save).filename().string();
    const fs::path save_folder = fs::path(opt.save).parent_path().empty() ? "." : fs::path(opt.save).parent_path();
    std::vector<fs::path> folders;
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    if (!ec) folders.push_back(tmp);
    folders.push_back(".");
    std::string failures;
    for (const fs::path& folder : folders) {
        if (same_file(folder.string(), save_folder.string())) continue;  // where the save just failed
        std::string place = (folder / name).string();
        for (int n = 1; fs::exists(place, ec) && n < 100; ++n) place = (folder / (name + "." + std::to_string(n))).string();
        try {
            require_writable_path(place, "checkpoint");
            save_checkpoint(place, c);
            return "the weights of step " + std::to_string(c.step) + " are kept in " + place +
                   " instead; continue with: " + resume_command(opt, place);
        } catch (const Error& e) {
            failures += std::string(failures.empty() ? "" : "; ") + e.what();
        }
    }
    return "nor could the weights be kept elsewhere (" + failures + ")";
}

// --val-batches beyond the validation split would read it again and again for nothing: refused
// when given, capped (with the banner's note) when it is the default.
inline std::string fit_val_batches(TrainOptions& opt, int64_t split_batches) {
    if (opt.val_batches <= split_batches) return "";
    const std::string split = opt.data_dir + "'s validation split holds " + std::to_string(split_batches) + " batch" +
                              (split_batches == 1 ? "" : "es") + " of " + std::to_string(opt.batch) + " x " +
                              std::to_string(opt.seq) + " tokens";
    if (opt.given("--val-batches"))
        throw Error("--val-batches " + std::to_string(opt.val_batches) + ": " + split +
                    ", so each validation would read it more than once; give at most " +
                    std::to_string(split_batches));
    const int asked = opt.val_batches;
    opt.val_batches = static_cast<int>(split_batches);
    return split + ": each validation reads those, not the default --val-batches " + std::to_string(asked);
}

// A profiled step's table, and with a --log its JSON and figure beside the log.
inline void report_profile(const ProfileReport& report, const ProfileContext& run, const std::string& log_path,
                           Logger& log) {
    std::printf("%s", profile_table(report, run).c_str());
    const std::string json = profile_path(log_path, ".json"), svg = profile_path(log_path, ".svg");
    if (!json.empty()) {
        try {  // checked before the first step; a full disk now must not end a long run
            ReplacingFile file(json, "--profile's table");
            file.write(profile_json(report, run));
            file.commit();
        } catch (const Error& e) {
            std::printf("warning: %s; the run goes on\n", e.what());
            std::fflush(stdout);
            return;
        }
        const std::string why_not = draw_profile_figure(json, svg);
        std::printf("profile    %s%s\n", json.c_str(),
                    why_not.empty() ? (", " + svg).c_str() : ("; figure: " + why_not).c_str());
        log.event("profile", "\"step\": " + std::to_string(run.step - 1) + ", \"json\": " + Logger::json_string(json) +
                                 ", \"svg\": " + (why_not.empty() ? Logger::json_string(svg) : "null"));
    }
    std::fflush(stdout);
}

// Trains as `opt` says. With several processes, a failure of this one is printed and sent to the
// others, and ends the process (Parallel::fail), so that none of them waits for it.
template <class S>
int train(const TrainOptions& opt) {
    // The processes training together (one, unless a launcher started several): they meet here.
    // Only rank 0 prints, logs, samples and writes checkpoints; the others report only errors.
    const auto parallel = join_the_run<S>(ParallelSettings{opt.zero, true, opt.step_timeout});
    // The model outlives train_with(): a failure is reported before its memory is freed, since
    // freeing waits for the GPU, which may be waiting for the other processes.
    std::unique_ptr<GPT<S>> model;
    try {
        if (parallel->rank() > 0 && !std::freopen("/dev/null", "w", stdout))
            throw Error("rank " + std::to_string(parallel->rank()) + ": cannot silence stdout");
        return train_with<S>(opt, *parallel, model);
    } catch (const std::bad_alloc&) {
        parallel->fail(Error("out of host memory (try a smaller --batch or --model)"));
        throw;
    } catch (const std::exception& e) {
        parallel->fail(e);  // with a watchdog, it does not return
        throw;
    }
}

template <class S, class Parallel>
int train_with(TrainOptions opt, Parallel& parallel, std::unique_ptr<GPT<S>>& model_holder) {
    const int rank = parallel.rank(), world = parallel.world();
    const InjectedFault fault = injected_fault(world);

    // The outputs first: a run must not fail at its end because it cannot write what it made.
    if (!opt.save.empty() && rank == 0) require_writable_path(opt.save, "--save");
    const std::string profile_json_path = opt.profile ? profile_path(opt.log, ".json") : "";
    if (!profile_json_path.empty() && rank == 0) {
        require_writable_path(profile_json_path, "--profile's table");
        require_writable_path(profile_path(opt.log, ".svg"), "--profile's figure");
    }
    if (opt.stop_after > 0 && opt.save.empty())
        throw Error("--stop-after " + std::to_string(opt.stop_after) + " needs --save (the checkpoint to resume from)");
    // A resumed run goes on with the log its run was writing (its lines of steps after the
    // checkpoint are dropped once the run has passed every check); another --log starts anew.
    const bool log_continues = rank == 0 && !opt.resume.empty() && !opt.log.empty() &&
                               same_file(saved_option(load_checkpoint_header(opt.resume), "--log"), opt.log);
    Logger log(rank == 0 ? opt.log : "", log_continues);

    // Model: a checkpoint's config wins over --model.
    Checkpoint start;
    std::vector<std::string> init_notes;  // what --init read, for the banner
    const std::string ckpt_path = !opt.resume.empty() ? opt.resume : opt.init;
    if (!opt.resume.empty()) {
        start = load_checkpoint(opt.resume);
    } else if (!opt.init.empty()) {
        start = load_model_file(opt.init, &init_notes);  // a checkpoint, an llm.c file, a safetensors file
    } else {
        start.config = config_by_name(opt.model);
    }
    const GPTConfig& config = start.config;
    if (opt.seq > config.max_seq_len)
        throw Error("--seq " + std::to_string(opt.seq) + " is longer than the model's context (" +
                    std::to_string(config.max_seq_len) + " for " + config.describe() + ")");
    if (!opt.resume.empty() && start.m.empty())
        throw Error("--resume " + opt.resume + ": checkpoint has no optimizer state (use --init to start from it)");

    if (!opt.resume.empty()) check_resume(opt, start, 0, world);
    // A default batch too large for this GPU (or host) is split; one the user gave is refused below.
    const std::string fit_note = opt.batch_given ? "" : fit_default_batch<S>(opt, config, parallel);
    // Each process reads its own windows of every step.
    const int micro_batches = micro_batches_per_step(opt, world);
    const long long step_tokens = static_cast<long long>(opt.batch) * opt.seq * micro_batches * world;
    if (!opt.resume.empty()) {
        check_resume(opt, start, micro_batches, world);
        if (start.step >= opt.steps) {
            std::printf("resume     %s has already taken all %d steps of this run (--steps %d): nothing to do; "
                        "give a larger --steps to train further\n",
                        opt.resume.c_str(), start.step, opt.steps);
            return 0;
        }
    }
    if (opt.stop_after > 0 && !opt.resume.empty() && opt.stop_after <= start.step)
        throw Error("--stop-after " + std::to_string(opt.stop_after) + " is not after the checkpoint's step " +
                    std::to_string(start.step));
    // The step after which this process stops: the end of the run, or --stop-after.
    const int stop = opt.stop_after > 0 ? std::min(opt.stop_after, opt.steps) : opt.steps;
    check_memory<S>(config, opt.batch, opt.seq, micro_batches, &parallel);  // refuse what cannot fit, before any work
    if (rank == 0) check_free_space(opt, config, stop - (opt.resume.empty() ? 0 : start.step));

    // Data: fail on bad shards before allocating the model.
    DataLoader train_data(find_shards(opt.data_dir, "train"), opt.batch, opt.seq, rank, world, config.vocab_size);
    std::unique_ptr<DataLoader> val_data;
    std::string val_note;
    if (opt.val_every > 0) {
        val_data = std::make_unique<DataLoader>(find_shards(opt.data_dir, "val"), opt.batch, opt.seq, rank, world,
                                                config.vocab_size);
        val_note = fit_val_batches(opt, val_data->batches_per_pass());
    }
    if (!opt.resume.empty()) {
        if (train_data.total_tokens() != start.run.data_tokens)
            throw Error("--resume " + opt.resume + ": the run trained on " + std::to_string(start.run.data_tokens) +
                        " tokens, " + opt.data_dir + " holds " + std::to_string(train_data.total_tokens()) +
                        "; resume with the same --data");
        try {
            train_data.seek({start.run.data_shard, start.run.data_pos});
        } catch (const Error& e) {
            throw Error("--resume " + opt.resume + ": " + e.what() + " (was the data changed?)");
        }
    }
    std::vector<EvalExample> eval_examples;
    if (!opt.eval_file.empty()) eval_examples = load_eval_examples(opt, config);
    std::unique_ptr<Tokenizer> tokenizer;
    if (opt.sample_every > 0) {
        try {
            tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(opt.tokenizer_dir));
        } catch (const MissingFile& e) {  // a tokenizer that is there but broken is an error
            std::printf("warning: %s; samples will be printed as token ids\n", e.what());
        }
    }

    // --profile reads each op against this GPU's ceilings, measured before the model takes its memory.
    Roofs roofs;
    if (opt.profile && rank == 0) {
        if (S::kIsGpu) {
            std::printf("profile    measuring this GPU's copy bandwidth and bf16 GEMM throughput first...\n");
            std::fflush(stdout);
        }
        roofs = S::measure_roofs();
    }
    // The step --profile times: the third of this run, after a warm-up step and, in a stage that
    // captures its step, the step that records it (0-based).
    const int first_step = opt.resume.empty() ? 0 : start.step;
    const int profile_step = opt.profile ? first_step + std::min(2, stop - first_step - 1) : -1;

    model_holder = std::make_unique<GPT<S>>(config, opt.batch, opt.seq, micro_batches, &parallel);
    GPT<S>& model = *model_holder;
    if (!opt.resume.empty()) model.resume_from(start);
    else if (!ckpt_path.empty()) model.set_parameters(start.params);
    else model.set_parameters(init_parameters(config, opt.seed));
    if (world > 1) check_same_weights(model, parallel, 0);

    const int log_lines_dropped = log_continues ? log.drop_lines_after(start.step) : 0;

    // MFU of this device: the FLOPs of the tokens it processes in a step.
    const double flops_per_step = flops_per_token(config, opt.seq) * double(step_tokens) / world;
    const double peak = S::peak_flops();
    std::printf("stage      %s: %s\n", S::name, S::description);
    std::printf("%s", describe_policy<S>().c_str());
    std::printf("device     %s\n", S::device_description().c_str());
    std::printf("parallel   %s\n", parallel.describe().c_str());
    std::printf("model      %s, %s parameters%s\n", config.describe().c_str(),
                with_commas(static_cast<int64_t>(ParamLayout(config).total())).c_str(),
                ckpt_path.empty() ? "" : (" from " + ckpt_path).c_str());
    for (const std::string& note : init_notes) std::printf("init       %s\n", note.c_str());
    // How often the run reads its training tokens: above 1, a loss that falls on tokens seen
    // before says less about what the model learned (the validation loss still says it).
    const double epochs = double(opt.steps) * double(step_tokens) / double(train_data.total_tokens());
    std::printf("data       %s: %s train tokens%s, epochs %s (%d steps x %s tokens)%s\n", opt.data_dir.c_str(),
                with_commas(static_cast<int64_t>(train_data.total_tokens())).c_str(),
                val_data ? (", " + with_commas(static_cast<int64_t>(val_data->total_tokens())) + " val tokens").c_str()
                         : "",
                epochs_text(epochs).c_str(), opt.steps, with_commas(step_tokens).c_str(),
                epochs > 1 ? ": the run reads its training tokens more than once" : "");
    if (!eval_examples.empty())
        std::printf("eval       %s: %s HellaSwag examples, every %d steps and at the end\n", opt.eval_file.c_str(),
                    with_commas(static_cast<int64_t>(eval_examples.size())).c_str(), opt.eval_every);
    std::printf("batch      %d x %d tokens x %d micro-batches x %d processes = %s tokens/step, %d steps, lr %g "
                "(warmup %d, cosine to %g x)\n",
                opt.batch, opt.seq, micro_batches, world, with_commas(step_tokens).c_str(), opt.steps, opt.lr,
                opt.warmup, opt.min_lr_frac);
    if (!fit_note.empty()) std::printf("memory     %s\n", fit_note.c_str());
    if (!opt.resume.empty()) {
        // A version 2 checkpoint carries only the numbers of its header (train/options.h).
        std::printf("resume     %s: step %d of %d, with %s%s\n", opt.resume.c_str(), start.step, opt.steps,
                    start.run.options.empty()
                        ? "its run's batch, schedule, optimizer and seed (an older checkpoint: data, --save, --log "
                          "and the rest are this command's)"
                        : "the options of its run",
                    opt.notes.empty() ? "" : ", except those given again:");
        for (const std::string& note : opt.notes) std::printf("resume     %s\n", note.c_str());
    }
    if (log_continues)
        std::printf("log        %s goes on after step %d%s\n", opt.log.c_str(), start.step,
                    log_lines_dropped > 0
                        ? (" (" + std::to_string(log_lines_dropped) + (log_lines_dropped == 1 ? " line" : " lines") +
                           " after the checkpoint, logged by the run before it ended, dropped)").c_str()
                        : "");
    if (!val_note.empty()) std::printf("val        %s\n", val_note.c_str());
    // Mistakes that would only show as a run that learns nothing.
    if (opt.lr == 0)
        std::printf("warning: --lr 0: the learning rate is 0 at every step, so the weights do not change\n");
    if (opt.warmup > opt.steps)
        std::printf("warning: --warmup %d is longer than the run (--steps %d): the learning rate never reaches "
                    "--lr %g\n", opt.warmup, opt.steps, opt.lr);
    if (opt.profile)
        std::printf("profile    step %d will be timed op by op%s%s\n", profile_step + 1,
                    profile_step - first_step < 2 ? " (within the warm-up: give --steps 3 or more for a steady step)"
                                                 : "",
                    profile_json_path.empty() ? "; --log PATH also keeps it as JSON and draws it" : "");
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
    if (!opt.resume.empty()) sample_rng.set_state(start.run.sample_rng);
    std::vector<double> step_ms;

    // Ctrl-C or SIGTERM: the step under way finishes and is saved, then the run stops.
    StopRequest stop_request(world == 1);
    // Everything the next step depends on, so that --resume continues exactly (RunState).
    auto save = [&](int steps_taken) {
        Checkpoint c = model.checkpoint(steps_taken);
        c.run = run_state(opt, micro_batches, world, train_data, sample_rng);
        if (rank > 0) return;  // it took part in gathering the state; rank 0 writes it
        parallel.hold_if_stopping();  // never a checkpoint of what a collective cut short
        try {
            save_checkpoint(opt.save, c);
        } catch (const Error& e) {
            const std::string what = e.what();
            if (what.find("is nan") != std::string::npos || what.find("is inf") != std::string::npos)
                throw Error(what + " (" + divergence_hint(opt, ckpt_path) + ")");
            if (const int sig = signal_during_save(); sig != 0 && stop_request.active() && stop_request.signal() == 0) {
                // Ctrl-C while saving asks to stop, not to lose the step: save again, then stop.
                stop_request.request(sig);
                save_checkpoint(opt.save, c);  // a second signal now ends the run with the error
            } else if (sig != 0) {
                throw;
            } else {
                throw Error(what + "; " + keep_elsewhere(opt, c));
            }
        }
        // A signal that came after the save's last look at it still asks the run to stop.
        if (const int sig = signal_during_save(); sig != 0) stop_request.request(sig);
        std::printf("saved      %s (step %d)\n", opt.save.c_str(), steps_taken);
        std::fflush(stdout);
    };

    // Each position's loss weighs 1 / (all positions of the step): the gradient is that of the
    // step's mean loss, whatever the number of micro-batches and processes.
    const float loss_scale = static_cast<float>(1.0 / double(step_tokens));
    std::vector<Batch> batches(micro_batches);
    bool wrapped = false;  // the training data was read to its end once: said once
    bool warned_divergence = false;
    int steps_done = first_step;
    for (int step = first_step; step < stop; ++step) {
        const bool last = step + 1 == opt.steps;
        const float lr = learning_rate(step, opt.steps, opt.warmup, opt.lr, opt.min_lr_frac);
        parallel.starting("step " + std::to_string(step + 1));
        if (fault.rank == rank && fault.step == step + 1 && fault.sigint) {
            std::raise(SIGINT);
        } else if (fault.rank == rank && fault.step == step + 1) {
            if (fault.hang)
                for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
            throw Error("rank " + std::to_string(rank) + ": step " + std::to_string(step + 1) +
                        " failed on purpose (GPT_TEST_FAIL)");
        }

        const auto t0 = std::chrono::steady_clock::now();
        int wraps_after = -1;  // the micro-batch of this step that read the last training tokens, if one did
        for (int i = 0; i < micro_batches; ++i) {
            batches[i] = train_data.next();
            if (!wrapped && wraps_after < 0 && train_data.passes() > 0) wraps_after = i;
        }
        // The step's work is queued on the device; train_step() waits for it once, at its end.
        std::unique_ptr<StepProfile<S>> profile;
        if (step == profile_step)
            profile = std::make_unique<StepProfile<S>>(model.context(), model.profile_sizes(opt.batch, opt.seq));
        const StepResult result =
            model.train_step(batches, opt.batch, opt.seq, loss_scale, opt.adamw, lr, step + 1, profile.get());
        parallel.hold_if_stopping();  // another process failed during the step: its result is void
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm))
            throw Error(std::string(std::isfinite(result.loss) ? "gradient norm" : "loss") + " is " +
                        std::to_string(std::isfinite(result.loss) ? result.grad_norm : result.loss) + " at step " +
                        std::to_string(step + 1) + " (" + divergence_hint(opt, ckpt_path) + "); no checkpoint saved");
        // The first step includes warm-up costs; a profiled one, its marks and no capture.
        if (step > first_step && step != profile_step) step_ms.push_back(ms);

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
        // A random model's loss is about ln(V); far above it, the run is diverging (before it is NaN).
        if (!warned_divergence && result.loss > 2.0 * std::log(double(config.vocab_size)) + 10.0) {
            warned_divergence = true;
            std::printf("warning: loss %.3g at step %d is far above a random model's %.1f (ln %d): the run is "
                        "diverging; %s\n", result.loss, step + 1, std::log(double(config.vocab_size)),
                        config.vocab_size, divergence_hint(opt, ckpt_path).substr(18).c_str());
        }
        if (profile && rank == 0) {
            ProfileContext run{S::name, S::device_description(), config.describe(), S::Clock::kName, opt.batch,
                               opt.seq, micro_batches, world, step + 1, false, roofs};
            // [stage switch kCaptureStep]
            run.captured = S::kCaptureStep;  // the table says this step ran uncaptured all the same
            // [end stage switch kCaptureStep]
            report_profile(profile->report(), run, opt.log, log);
        }
        if (wraps_after >= 0) {
            wrapped = true;
            const std::string again =
                wraps_after + 1 < micro_batches
                    ? "in its micro-batch " + std::to_string(wraps_after + 1) + " of " + std::to_string(micro_batches) +
                          ": from the next one the run reads them again"
                    : ": from step " + std::to_string(step + 2) + " the run reads them again";
            if (wraps_after + 1 < micro_batches || step + 1 < stop)
                std::printf("data       step %d read the last training tokens%s (epochs %s in all); from here the "
                            "training loss is on text the model has seen, the validation loss is not\n",
                            step + 1, again.c_str(), epochs_text(epochs).c_str());
        }

        if (val_data && ((step + 1) % opt.val_every == 0 || last)) {
            const float val_loss = validation_loss(model, *val_data, opt.val_batches);
            parallel.hold_if_stopping();
            if (!std::isfinite(val_loss))
                throw Error("validation loss is " + std::to_string(val_loss) + " at step " + std::to_string(step + 1) +
                            " (" + divergence_hint(opt, ckpt_path) + "); no checkpoint saved");
            log.validation(step, val_loss);
        }
        if (!eval_examples.empty() && ((step + 1) % opt.eval_every == 0 || last)) {
            parallel.starting("the HellaSwag evaluation after step " + std::to_string(step + 1));
            const HellaSwagResult h = evaluate_hellaswag(model, eval_examples, parallel);
            log.hellaswag(step, h.accuracy(), h.correct, h.examples, h.seconds);
        }
        if (world > 1 && ((step + 1) % kCheckWeightsEvery == 0 || step + 1 == stop))
            check_same_weights(model, parallel, step + 1);
        if (rank == 0 && opt.sample_every > 0 && ((step + 1) % opt.sample_every == 0 || last))
            log.sample(step, generate(model, tokenizer.get(), opt.sample_tokens, opt.temperature, opt.top_k,
                                      sample_rng));
        if (!opt.save.empty() && ((opt.save_every > 0 && (step + 1) % opt.save_every == 0) || last ||
                                  step + 1 == stop || stop_request.signal() != 0))
            save(step + 1);
        steps_done = step + 1;
        if (stop_request.signal() != 0) break;
    }
    parallel.starting("the end of the run");
    const bool interrupted = stop_request.signal() != 0 && steps_done < opt.steps;
    if (steps_done < opt.steps) {
        const std::string why = interrupted ? std::string(" (") + stop_request.signal_name() + ")" : "";
        if (!opt.save.empty())
            std::printf("stopped    after step %d of %d%s; continue with: %s\n", steps_done, opt.steps, why.c_str(),
                        resume_command(opt, opt.save).c_str());
        else
            std::printf("stopped    after step %d of %d%s; nothing saved: with --save PATH a stopped run keeps its "
                        "last step\n", steps_done, opt.steps, why.c_str());
        log.event("stopped", "\"after_step\": " + std::to_string(steps_done) + ", \"steps\": " +
                                 std::to_string(opt.steps) + ", \"reason\": " +
                                 Logger::json_string(interrupted ? stop_request.signal_name() : "--stop-after"));
    }

    if (!step_ms.empty()) {
        const double ms = median(step_ms);
        const double tps = step_tokens / (ms / 1000.0);
        char mfu[32] = "n/a";
        if (peak > 0) std::snprintf(mfu, sizeof(mfu), "%.1f%%", 100.0 * flops_per_step / (ms / 1000.0) / peak);
        std::printf("summary    median %.1f ms/step, %.0f tokens/s, MFU %s, peak memory %.2f GiB, epochs %s\n", ms, tps,
                    mfu, S::peak_memory_bytes() / 1073741824.0,
                    epochs_text(double(steps_done) * double(step_tokens) / double(train_data.total_tokens())).c_str());
        log.event("summary", "\"median_ms\": " + std::to_string(ms) + ", \"tokens_per_s\": " + std::to_string(tps) +
                                 ", \"peak_memory_bytes\": " + std::to_string(S::peak_memory_bytes()));
    }
    if (steps_done == opt.steps) {  // what the weights are good for now
        if (!opt.save.empty())
            std::printf("next       continue a text with these weights: %s --init %s --prompt \"The jury said\"\n",
                        opt.program.c_str(), shell_quoted(opt.save).c_str());
        else
            std::printf("next       --save PATH keeps the weights; %s --init PATH --prompt TEXT then continues a text\n",
                        opt.program.c_str());
    }
    // A run stopped by a signal ends as one: 128 + the signal's number, as a shell reports it.
    return interrupted ? 128 + stop_request.signal() : 0;
}

}  // namespace gpt
