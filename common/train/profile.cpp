#include "train/profile.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstdio>

#include "util/json.h"

extern char** environ;

namespace gpt {

Cost profiled_op_cost(const std::string& name, const std::string& pass, int rows, const ProfileSizes& sizes,
                      bool& counted) {
    OpSizes s = sizes.ops;
    if (rows > 0) s.B = double(rows) / s.T;  // a chunk of the positions (the LM head and the loss)
    const double C = s.C;
    const bool backward = name.size() > 9 && name.compare(name.size() - 9, 9, " backward") == 0;
    const std::string op = backward ? name.substr(0, name.size() - 9) : name;
    counted = true;
    if (op == "embedding") return backward ? cost::embedding_backward(s) : cost::embedding_forward(s);
    if (op == "ln_1") return backward ? cost::layernorm_backward(s) : cost::layernorm_forward(s);
    if (op == "residual+ln_1" || op == "residual+ln_2" || op == "residual+ln_f")
        return backward ? cost::residual_layernorm_backward(s) : cost::residual_layernorm_forward(s);
    if (op == "qkv") return backward ? cost::matmul_backward(s, C, 3 * C, true) : cost::matmul_forward(s, C, 3 * C, true);
    if (op == "attn_proj") return backward ? cost::matmul_backward(s, C, C, true) : cost::matmul_forward(s, C, C, true);
    if (op == "attention") return backward ? cost::attention_backward(s) : cost::attention_forward(s);
    // The MLP: forward fc+gelu then fc_proj; backward fc_proj's carried on through the GELU, then fc's.
    if (name == "fc+gelu") return cost::matmul_bias_gelu_forward(s, C, 4 * C);
    if (name == "fc_proj") return cost::matmul_forward(s, 4 * C, C, true);
    if (name == "fc_proj+gelu backward") return cost::matmul_backward_gelu(s, 4 * C, C);
    if (name == "fc backward") return cost::matmul_backward(s, C, 4 * C, true);
    if (op == "lm_head")
        return backward ? cost::matmul_backward(s, C, s.Vp, false) : cost::matmul_forward(s, C, s.Vp, false);
    // In a training step the classifier runs in the backward pass: the loss and its gradient at once.
    if (name == "classifier") return pass == "backward" ? cost::classifier_with_grad(s) : cost::classifier_forward(s);
    if (name == "optimizer") return cost::optimizer_step(sizes.optimizer_params, s.act, sizes.act_copy);
    counted = false;
    return {};
}

ProfileReport summarize_profile(const std::vector<TimedOp>& calls, double step_ms, const ProfileSizes& sizes) {
    ProfileReport report;
    report.step_ms = step_ms;
    for (const TimedOp& call : calls) {
        ProfileRow* row = nullptr;
        for (ProfileRow& r : report.rows)
            if (r.name == call.name && r.pass == call.pass && r.within == call.within) row = &r;
        if (!row) {
            report.rows.emplace_back();
            row = &report.rows.back();
            row->name = call.name;
            row->pass = call.pass;
            row->within = call.within;
        }
        bool counted = false;
        const Cost c = profiled_op_cost(call.name, call.pass, call.rows, sizes, counted);
        row->counted = counted;
        row->calls += 1;
        row->ms += call.ms;
        row->cost.bytes += c.bytes;
        row->cost.flops += c.flops;
        if (call.within.empty()) report.ops_ms += call.ms;
    }
    return report;
}

namespace {

std::string format(const char* fmt, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, v);
    return buf;
}

// What one row achieved: TFLOP/s for an op of matrix products, GB/s for the others; and of which roof.
struct Achieved {
    double gb_per_s = NAN, tflops = NAN, roof_share = NAN;
};
Achieved achieved(const ProfileRow& row, const Roofs& roofs) {
    Achieved a;
    if (!row.counted || !(row.ms > 0)) return a;
    const double seconds = row.ms / 1e3;
    a.gb_per_s = row.cost.bytes / seconds / 1e9;
    if (row.cost.matmul_like()) a.tflops = row.cost.flops / seconds / 1e12;
    if (roofs.known()) a.roof_share = row.cost.matmul_like() ? a.tflops / roofs.tflops : a.gb_per_s / roofs.gb_per_s;
    return a;
}

// Enough digits that counts of bytes and FLOPs come back whole.
std::string json_number(double v) { return std::isfinite(v) ? format("%.15g", v) : "null"; }

}  // namespace

std::string profile_table(const ProfileReport& report, const ProfileContext& run) {
    const std::string p = "profile    ";
    std::string out;
    out += p + "step " + std::to_string(run.step) + ", timed op by op with " + run.clock +
           (run.captured ? "; not captured: this stage replays its step as one CUDA Graph, which removes the "
                           "launch gaps this step shows"
                         : "") +
           "\n";
    out += p + (run.roofs.known() ? "roofs " + run.roofs.source + ": copy " + format("%.0f", run.roofs.gb_per_s) +
                                        " GB/s, bf16 GEMM " + format("%.1f", run.roofs.tflops) + " TFLOP/s"
                                  : "no roofs: " + run.roofs.source) +
           "\n";
    char line[256];
    std::snprintf(line, sizeof(line), "%-30s %-8s %5s %9s %6s %9s %9s %16s %5s", "op", "pass", "calls", "ms", "share",
                  "MB", "GFLOP", "achieved", "roof");
    out += p + line + "\n";
    const double step = report.step_ms > 0 ? report.step_ms : 1;
    for (const ProfileRow& row : report.rows) {
        const Achieved a = achieved(row, run.roofs);
        const std::string name = row.within.empty() ? row.name : "  " + row.name + " (in " + row.within + ")";
        // Below 1 TFLOP/s (the CPU), in GFLOP/s, so that the figure still says something.
        const std::string rate = !std::isfinite(a.tflops) ? (std::isfinite(a.gb_per_s) ? format("%.0f GB/s", a.gb_per_s) : "-")
                                 : a.tflops >= 1          ? format("%.1f TFLOP/s", a.tflops)
                                                          : format("%.1f GFLOP/s", 1e3 * a.tflops);
        std::snprintf(line, sizeof(line), "%-30s %-8s %5d %9.3f %5.1f%% %9s %9s %16s %5s", name.c_str(),
                      row.pass.c_str(), row.calls, row.ms, 100 * row.ms / step,
                      row.counted ? format("%.1f", row.cost.bytes / 1e6).c_str() : "-",
                      row.cost.matmul_like() ? format("%.1f", row.cost.flops / 1e9).c_str() : "-", rate.c_str(),
                      std::isfinite(a.roof_share) ? format("%.0f%%", 100 * a.roof_share).c_str() : "-");
        out += p + line + "\n";
    }
    std::snprintf(line, sizeof(line), "%-30s %-8s %5s %9.3f %5.1f%%", "sum of the ops", "", "", report.ops_ms,
                  100 * report.ops_ms / step);
    out += p + line + "\n";
    std::snprintf(line, sizeof(line), "%-30s %-8s %5s %9.3f %5.1f%%", "the step (first op to last)", "", "",
                  report.step_ms, 100.0);
    out += p + line + "\n";
    std::snprintf(line, sizeof(line), "%-30s %-8s %5s %9.3f %5.1f%%  %s", "difference", "", "",
                  report.difference_ms(), 100 * report.difference_ms() / step,
                  "between the ops: launch gaps, the batch's upload, memsets, the loss sum");
    out += p + line + "\n";
    return out;
}

std::string profile_json(const ProfileReport& report, const ProfileContext& run) {
    std::string out = "{\n  \"kind\": \"gpt-step-profile\",\n  \"version\": 1,\n";
    out += "  \"stage\": " + json_string(run.stage) + ",\n  \"device\": " + json_string(run.device) +
           ",\n  \"model\": " + json_string(run.model) + ",\n";
    out += "  \"batch\": " + std::to_string(run.batch) + ", \"seq\": " + std::to_string(run.seq) +
           ", \"micro_batches\": " + std::to_string(run.micro_batches) + ", \"world\": " + std::to_string(run.world) +
           ",\n";
    out += "  \"step\": " + std::to_string(run.step) + ",\n  \"captured\": " + (run.captured ? "true" : "false") +
           ",\n  \"clock\": " + json_string(run.clock) + ",\n";
    out += "  \"roof\": {\"source\": " + json_string(run.roofs.known() ? run.roofs.source : "none") +
           ", \"gb_per_s\": " + (run.roofs.known() ? json_number(run.roofs.gb_per_s) : "null") +
           ", \"tflops\": " + (run.roofs.known() ? json_number(run.roofs.tflops) : "null") + "},\n";
    out += "  \"ops\": [\n";
    for (size_t i = 0; i < report.rows.size(); ++i) {
        const ProfileRow& row = report.rows[i];
        const Achieved a = achieved(row, run.roofs);
        out += "    {\"name\": " + json_string(row.name) + ", \"pass\": " + json_string(row.pass) +
               ", \"calls\": " + std::to_string(row.calls) + ", \"ms\": " + json_number(row.ms) +
               ", \"share\": " + json_number(report.step_ms > 0 ? row.ms / report.step_ms : NAN) +
               ", \"bytes\": " + json_number(row.cost.bytes) + ", \"flops\": " + json_number(row.cost.flops) +
               ", \"gb_per_s\": " + json_number(a.gb_per_s) + ", \"tflops\": " + json_number(a.tflops) +
               ", \"roof_share\": " + json_number(a.roof_share) +
               ", \"within\": " + (row.within.empty() ? "null" : json_string(row.within)) + "}" +
               (i + 1 < report.rows.size() ? "," : "") + "\n";
    }
    out += "  ],\n";
    out += "  \"ops_ms\": " + json_number(report.ops_ms) + ",\n  \"step_ms\": " + json_number(report.step_ms) +
           ",\n  \"difference_ms\": " + json_number(report.difference_ms()) + "\n}\n";
    return out;
}

std::string profile_path(const std::string& log_path, const std::string& extension) {
    if (log_path.empty()) return "";
    std::string stem = log_path;
    for (const std::string suffix : {".jsonl", ".json"})
        if (stem.size() > suffix.size() && stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0) {
            stem.resize(stem.size() - suffix.size());
            break;
        }
    return stem + ".profile" + extension;
}

std::string draw_profile_figure(const std::string& json_path, const std::string& svg_path) {
    const std::string python = GPT_FIGURE_PYTHON;  // the Python 3 CMake found; standard library only
    const std::string script = std::string(GPT_SOURCE_DIR) + "/tests/bench/step_breakdown.py";
    const std::string command = "python3 " + script + " --profile " + json_path + " --out " + svg_path;
    if (python.empty()) return "no Python 3 was found when the build was configured; draw it with: " + command;
    std::vector<std::string> args{python, script, "--profile", json_path, "--out", svg_path};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The script's own table would repeat the trainer's: its output goes nowhere, and it reads nothing.
    std::remove(svg_path.c_str());  // so that an SVG afterwards is this run's
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const bool redirected = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) == 0 &&
                            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0) == 0 &&
                            posix_spawn_file_actions_adddup2(&actions, 1, 2) == 0;
    pid_t pid = 0;
    const int spawned =
        redirected ? posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ) : -1;
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return "cannot run " + python + "; draw it with: " + command;
    int status = 0;
    pid_t waited = -1;
    do waited = waitpid(pid, &status, 0);
    while (waited < 0 && errno == EINTR);
    if (waited < 0 || !WIFEXITED(status)) return "the figure script did not finish; see: " + command;
    // Exit 1 is the script's "drawn, with ops it does not know", but also Python's for any
    // uncaught error: only an SVG that is there says which.
    struct stat st {};
    const bool drawn = stat(svg_path.c_str(), &st) == 0 && st.st_size > 0;
    if (WEXITSTATUS(status) == 0 && drawn) return "";
    if (WEXITSTATUS(status) == 1 && drawn) return "drawn, but the script met an op it does not know; see: " + command;
    return "the figure script failed; see: " + command;
}

}  // namespace gpt
