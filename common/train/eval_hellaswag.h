// HellaSwag accuracy of a model (data/hellaswag.h), the same code on every trainer: during
// training (--eval FILE --eval-every N) and alone on saved weights (--init PATH --eval FILE).
//
// Every ending of an example is a row: the context's tokens, then the ending's. The rows go
// through the model's forward B at a time (a forward with targets, no backward), each position's
// loss is read back, and the ending whose tokens have the lowest mean loss is the model's answer.
// Processes that train together share the examples (example i on rank i mod world) and add up
// what they got right.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/hellaswag.h"
#include "data/tokenizer.h"
#include "dist/group.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "train/gpt.h"
#include "train/logger.h"
#include "train/memory.h"
#include "train/options.h"
#include "train/processes.h"
#include "util/error.h"
#include "util/file.h"

namespace gpt {

struct HellaSwagResult {
    int64_t correct = 0, examples = 0;
    double seconds = 0;
    double accuracy() const { return examples > 0 ? double(correct) / double(examples) : 0.0; }
};

// The positions the longest row of the examples takes: a row of L tokens takes L - 1, its last
// token is only predicted.
inline int positions_needed(const std::vector<EvalExample>& examples) {
    int positions = 1;
    for (const EvalExample& e : examples) positions = std::max(positions, e.longest_row() - 1);
    return positions;
}

// The positions a row may take: the training's --seq during training (--eval-every); in an
// evaluation alone, --seq if given, else the model's whole context (the training's default --seq
// is no limit of the model's).
inline int eval_positions(const TrainOptions& opt, const GPTConfig& config) {
    return opt.eval_every > 0 || opt.given("--seq") ? opt.seq : config.max_seq_len;
}

// The examples of --eval (the first --eval-examples of them), checked against the model: every
// row must fit eval_positions() and every token the vocabulary. Errors are one line, and their
// advice is one the model accepts: no --seq beyond its context.
inline std::vector<EvalExample> load_eval_examples(const TrainOptions& opt, const GPTConfig& config) {
    std::unique_ptr<Tokenizer> tokenizer;
    try {
        tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(opt.tokenizer_dir));
    } catch (const MissingFile&) {  // llm.c's binary file needs none; JSON Lines say so themselves
    }
    std::vector<EvalExample> examples = load_hellaswag(opt.eval_file, tokenizer.get());
    if (opt.eval_examples > 0 && size_t(opt.eval_examples) < examples.size()) examples.resize(opt.eval_examples);
    const std::string where = "--eval " + opt.eval_file + ": ";
    for (const EvalExample& e : examples) {
        std::vector<const std::vector<int>*> parts = {&e.context};
        for (const std::vector<int>& ending : e.endings) parts.push_back(&ending);
        for (const std::vector<int>* tokens : parts)
            for (const int t : *tokens)
                if (t < 0 || t >= config.vocab_size)
                    throw Error(where + "example " + std::to_string(e.line) + " holds token " + std::to_string(t) +
                                ", not below the model's vocabulary of " + std::to_string(config.vocab_size));
    }
    auto first_longer_than = [&](int positions) {
        return std::find_if(examples.begin(), examples.end(),
                            [&](const EvalExample& e) { return e.longest_row() - 1 > positions; });
    };
    // "example 33 is 304 tokens long (context and ending), longer than X allows (65)"
    auto too_long = [&](std::vector<EvalExample>::const_iterator e, const std::string& limit, int positions) {
        return where + "example " + std::to_string(e->line) + " is " + std::to_string(e->longest_row()) +
               " tokens long (context and ending), longer than " + limit + " allows (" +
               std::to_string(positions + 1) + ")";
    };
    // The examples before the first that does not fit: what --eval-examples can keep.
    auto or_stop_before = [&](std::vector<EvalExample>::const_iterator e) {
        const auto before = e - examples.cbegin();
        return before > 0 ? ", or --eval-examples " + std::to_string(before) + " to stop before it" : std::string();
    };
    const auto beyond_context = first_longer_than(config.max_seq_len);
    if (beyond_context != examples.end())
        throw Error(too_long(beyond_context, "the model's context of " + std::to_string(config.max_seq_len),
                             config.max_seq_len) +
                    "; use a model with a longer context" + or_stop_before(beyond_context));
    const int positions = eval_positions(opt, config);
    const auto beyond_seq = first_longer_than(positions);
    if (beyond_seq != examples.end())
        throw Error(too_long(beyond_seq, "--seq " + std::to_string(positions), positions) + "; use --seq " +
                    std::to_string(positions_needed(examples)) + " or more" + or_stop_before(beyond_seq));
    return examples;
}

// A line every ~10 s while an evaluation alone runs (HellaSwag's 10,042 examples take minutes on
// a CPU), none for one that ends sooner; it goes to stdout, not to the log. The times are passed
// to line(), so that a test need not wait.
class EvalProgress {
  public:
    explicit EvalProgress(size_t total, double every_seconds = 10, FILE* out = stdout)
        : total_(total), every_(every_seconds), next_(every_seconds), out_(out) {}
    // "eval       2400 of 10042 examples in 10 s, about 32 s to go", or "" when the last line
    // is less than every_seconds old.
    std::string line(size_t done, double seconds) {
        if (seconds < next_ || done == 0) return "";
        next_ = seconds + every_;
        char text[128];
        std::snprintf(text, sizeof(text), "eval       %zu of %zu examples in %.0f s, about %.0f s to go", done,
                      total_, seconds, seconds * double(total_ - done) / double(done));
        return text;
    }
    // Prints line(done, the seconds since construction), if any.
    void report(size_t done) {
        const std::string text =
            line(done, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
        if (text.empty()) return;
        std::fprintf(out_, "%s\n", text.c_str());
        std::fflush(out_);
    }

  private:
    size_t total_;
    double every_, next_;
    FILE* out_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The mean loss over the tokens of each ending of this process's examples (example i on rank
// i mod world): means[i][k] for ending k; the other processes' examples stay empty. Every row
// must fit the model's T positions (load_eval_examples checks it first). `progress`, if any, hears
// after each forward how many of this process's examples are done.
template <class S>
std::vector<std::vector<double>> ending_mean_losses(GPT<S>& model, const std::vector<EvalExample>& examples,
                                                    int rank, int world, EvalProgress* progress = nullptr) {
    const int B = model.max_batch();
    // Positions per row: the longest row's, not the model's T (HellaSwag's rows are about 100
    // tokens; at T = 1024 the rest would be padding). The same on every process.
    int T = 1;
    for (const EvalExample& e : examples) {
        if (e.longest_row() - 1 > model.max_seq())
            throw Error("HellaSwag example " + std::to_string(e.line) + " takes " + std::to_string(e.longest_row() - 1) +
                        " positions, the model was built for " + std::to_string(model.max_seq()));
        T = std::max(T, e.longest_row() - 1);
    }

    struct Row {
        size_t example;
        int ending;
    };
    std::vector<Row> rows;  // this process's
    for (size_t i = size_t(rank); i < examples.size(); i += size_t(world))
        for (size_t k = 0; k < examples[i].endings.size(); ++k) rows.push_back({i, int(k)});

    std::vector<std::vector<double>> means(examples.size());
    size_t done = 0;  // examples whose every ending is scored
    std::vector<int> inputs(size_t(B) * T), targets(size_t(B) * T);
    for (size_t first = 0; first < rows.size(); first += size_t(B)) {
        const int n = static_cast<int>(std::min(rows.size() - first, size_t(B)));
        // Padding: <|endoftext|> as input and target, its loss unread.
        std::fill(inputs.begin(), inputs.end(), Tokenizer::kEndOfText);
        std::fill(targets.begin(), targets.end(), Tokenizer::kEndOfText);
        for (int r = 0; r < n; ++r) {
            const EvalExample& e = examples[rows[first + r].example];
            std::vector<int> row = e.context;
            const std::vector<int>& ending = e.endings[rows[first + r].ending];
            row.insert(row.end(), ending.begin(), ending.end());
            for (size_t t = 0; t + 1 < row.size(); ++t) {
                inputs[size_t(r) * T + t] = row[t];
                targets[size_t(r) * T + t] = row[t + 1];
            }
        }
        model.forward(inputs.data(), targets.data(), n, T);
        const std::vector<float> losses = model.position_losses();
        for (int r = 0; r < n; ++r) {
            const Row& row = rows[first + r];
            const EvalExample& e = examples[row.example];
            // Ending token j is predicted at position context + j - 1.
            const size_t begin = size_t(r) * T + e.context.size() - 1, count = e.endings[row.ending].size();
            double sum = 0;
            for (size_t j = 0; j < count; ++j) sum += losses[begin + j];
            means[row.example].push_back(sum / double(count));
            done += means[row.example].size() == e.endings.size();
        }
        if (progress) progress->report(done);
    }
    return means;
}

template <class S, class Parallel>
HellaSwagResult evaluate_hellaswag(GPT<S>& model, const std::vector<EvalExample>& examples, Parallel& parallel,
                                   EvalProgress* progress = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::vector<double>> means =
        ending_mean_losses(model, examples, parallel.rank(), parallel.world(), progress);
    int64_t correct = 0;
    for (size_t i = 0; i < examples.size(); ++i)
        if (!means[i].empty()) correct += lowest_mean_loss(means[i]) == examples[i].label;
    HellaSwagResult result;
    result.examples = static_cast<int64_t>(examples.size());
    for (const uint64_t c : parallel.gather_values(static_cast<uint64_t>(correct))) result.correct += int64_t(c);
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
}

// `train --init PATH --eval FILE` (no --eval-every): the accuracy of saved weights, no training.
template <class S>
int evaluate_only(const TrainOptions& opt) {
    const dist::Launch launch = dist::launch_from_environment();
    if (launch.world > 1)
        throw Error("--eval without --eval-every evaluates in one process, but the launcher's environment (" +
                    launch.launcher + ") says this is rank " + std::to_string(launch.rank) + " of " +
                    std::to_string(launch.world) + ": run it without a launcher, or train with --eval-every N");
    const auto parallel = join_the_run<S>(ParallelSettings{});  // this process's GPU, before any CUDA object
    const std::string path = !opt.init.empty() ? opt.init : opt.resume;
    std::vector<std::string> notes;
    const Checkpoint start = path.empty() ? Checkpoint{} : load_model_file(path, &notes);
    const GPTConfig config = path.empty() ? config_by_name(opt.model) : start.config;
    if (opt.given("--seq") && opt.seq > config.max_seq_len)
        throw Error("--seq " + std::to_string(opt.seq) + " is longer than the model's context (" +
                    std::to_string(config.max_seq_len) + " for " + config.describe() + ")");
    const std::vector<EvalExample> examples = load_eval_examples(opt, config);
    // Built for the longest row, not the whole context: HellaSwag's rows are about 100 tokens.
    const int T = positions_needed(examples);
    check_memory<S>(config, opt.batch, T, 1, parallel.get());
    GPT<S> model(config, opt.batch, T, 1, parallel.get());
    model.set_parameters(path.empty() ? init_parameters(config, opt.seed) : start.params);
    std::printf("stage      %s on %s\n", S::name, S::device_description().c_str());
    std::printf("model      %s from %s\n", config.describe().c_str(),
                path.empty() ? ("its initialisation (seed " + std::to_string(opt.seed) + "): no --init").c_str()
                             : path.c_str());
    for (const std::string& note : notes) std::printf("init       %s\n", note.c_str());
    std::printf("eval       %s: %zu examples, %d rows per forward\n", opt.eval_file.c_str(), examples.size(),
                opt.batch);
    std::fflush(stdout);
    Logger log(opt.log);
    EvalProgress progress(examples.size());
    const HellaSwagResult r = evaluate_hellaswag(model, examples, *parallel, &progress);
    log.hellaswag(-1, r.accuracy(), r.correct, r.examples, r.seconds);
    return 0;
}

}  // namespace gpt
