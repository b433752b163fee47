// Where one training step's time goes, op by op, on this run's own GPU, model and batch
// (`./train --profile`): one step after the warm-up runs with a mark of the stage's clock before
// and after every op of the graph (S::Clock: CUDA events on the stream, or the host's clock on
// the CPU), never as a captured CUDA Graph. After the step, each op's time is set beside the
// least bytes it must move and the FLOPs of its matrix products (train/op_cost.h, the kernel
// benchmark's accounting), the GB/s or TFLOP/s that makes, and the share of this GPU's ceilings
// (Roofs: measured at start-up).
//
// StepProfile<S> records, in the stage's types; everything after the marks (the sums, the table,
// the JSON) is plain host code in profile.cpp, which the CPU tests check.
#pragma once
#include <string>
#include <vector>

#include "train/op_cost.h"

namespace gpt {

// What a step's ops are sized by: the micro-batch's shapes (OpSizes; B·T positions per pass),
// and what the optimizer updates.
struct ProfileSizes {
    OpSizes ops;
    double optimizer_params = 0;  // parameters this process updates (its shard with ZeRO-1)
    bool act_copy = false;        // the optimizer also writes an act_t copy of the weights
};

// One op call of the profiled step, timed.
struct TimedOp {
    std::string name;    // as the graph names it: "qkv", "attention backward"
    std::string pass;    // "forward", "backward" or "update"
    std::string within;  // the op it ran inside of ("" at the top level)
    int rows = 0;        // positions it ran on; 0: all of the pass's (B·T)
    double ms = 0;
};

// The ops of a profiled step, one row per op name and pass, in the order of their first call.
struct ProfileRow {
    std::string name, pass, within;
    int calls = 0;
    double ms = 0;
    Cost cost;  // summed over the calls; zero where nothing is counted (collectives, zero_grad)
    bool counted = false;  // the accounting knows this op
};

struct ProfileReport {
    std::vector<ProfileRow> rows;
    double ops_ms = 0;   // the top-level ops' time (a nested op's is inside its parent's)
    double step_ms = 0;  // the step's own time, on the same clock
    double difference_ms() const { return step_ms - ops_ms; }
};

// The least bytes and the FLOPs of one call of the graph's op `name` in `pass` over `rows`
// positions (0: all of them). `counted` is false for an op the accounting has no model of
// (the collectives, zero_grad): its cost is then zero.
Cost profiled_op_cost(const std::string& name, const std::string& pass, int rows, const ProfileSizes& sizes,
                      bool& counted);

// The calls of one step summed per op name and pass, each row's cost included.
ProfileReport summarize_profile(const std::vector<TimedOp>& calls, double step_ms, const ProfileSizes& sizes);

// What the table and the JSON say about the run besides the ops.
struct ProfileContext {
    std::string stage, device, model, clock;
    int batch = 0, seq = 0, micro_batches = 1, world = 1;
    int step = 0;           // 1-based
    bool captured = false;  // the stage records its step as a CUDA Graph (this step ran uncaptured)
    Roofs roofs;
};

// The table the trainer prints.
std::string profile_table(const ProfileReport& report, const ProfileContext& run);
// The same as JSON (docs/formats.md, "A step's profile").
std::string profile_json(const ProfileReport& report, const ProfileContext& run);

// Where --profile writes its JSON and its figure, beside the --log: run.jsonl -> run.profile.json
// and run.profile.svg. Empty without a --log.
std::string profile_path(const std::string& log_path, const std::string& extension);

// Draws the step's figure (tests/bench/step_breakdown.py --profile JSON --out SVG) with the
// Python the build found; returns "" when drawn, else why not and the command to draw it.
std::string draw_profile_figure(const std::string& json_path, const std::string& svg_path);

// The recording, in the stage's clock: marks before and after every op of the graph
// (ModelGraph::op), and around the whole step. Nothing is read until report(), after the step's
// synchronisation.
template <class S>
class StepProfile {
  public:
    using Clock = typename S::Clock;

    StepProfile(typename S::Context& ctx, const ProfileSizes& sizes) : ctx_(ctx), sizes_(sizes) {}

    void set_pass(const char* pass) { pass_ = pass; }
    void begin_step() { step_begin_ = Clock::mark(ctx_); }
    void end_step() { step_end_ = Clock::mark(ctx_); }

    void begin(const char* name, int rows) {
        calls_.push_back({name, pass_, open_.empty() ? "" : calls_[open_.back()].name, rows, Clock::mark(ctx_), {}});
        open_.push_back(calls_.size() - 1);
    }
    void end() {
        calls_[open_.back()].end = Clock::mark(ctx_);
        open_.pop_back();
    }

    // After the step's synchronisation: the calls with their times, summed up.
    ProfileReport report() const {
        std::vector<TimedOp> timed;
        for (const Call& c : calls_) timed.push_back({c.name, c.pass, c.within, c.rows, Clock::ms(c.begin, c.end)});
        return summarize_profile(timed, Clock::ms(step_begin_, step_end_), sizes_);
    }

  private:
    struct Call {
        std::string name, pass, within;
        int rows;
        typename Clock::Mark begin, end;
    };
    typename S::Context& ctx_;
    ProfileSizes sizes_;
    const char* pass_ = "forward";
    std::vector<Call> calls_;
    std::vector<size_t> open_;  // the calls begun and not yet ended: ops nest (ZeRO's all-reduce in the optimizer)
    typename Clock::Mark step_begin_{}, step_end_{};
};

}  // namespace gpt
