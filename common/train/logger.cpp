#include "train/logger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace gpt {

namespace {

// The 0-based step a log line is about ("step": N), or -1 for a line about none.
long long step_of_line(const std::string& line) {
    const std::string key = "\"step\": ";
    const size_t at = line.find(key);
    if (at == std::string::npos) return -1;
    const char* p = line.c_str() + at + key.size();
    if (*p < '0' || *p > '9') return -1;  // null: not about a step
    return std::strtoll(p, nullptr, 10);
}

}  // namespace

Logger::Logger(const std::string& path, bool continues) : path_(path) {
    if (path.empty()) return;
    open(continues ? O_APPEND : O_TRUNC);  // opened now: a path that cannot be written fails first
}

int Logger::drop_lines_after(int steps_taken) {
    std::error_code ec;
    if (!jsonl_ || !std::filesystem::is_regular_file(path_, ec)) return 0;
    std::string kept;
    int dropped = 0;
    std::istringstream lines(read_regular_file(path_, "--log"));
    std::string line;
    while (std::getline(lines, line)) {
        // A line without its newline was cut short by the end of the process that wrote it.
        if (step_of_line(line) >= steps_taken || lines.eof()) {
            dropped += !line.empty();
            continue;
        }
        kept += line + "\n";
    }
    if (dropped == 0) return 0;
    // Whole or not at all: the log of the steps before stays, whatever happens now.
    std::fclose(jsonl_);
    jsonl_ = nullptr;
    ReplacingFile file(path_, "--log");
    file.write(kept);
    file.commit();
    open(O_APPEND);
    return dropped;
}

void Logger::open(int mode) {
    const std::string& path = path_;
    struct stat st = {};
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error("--log " + path + ": is a directory");
    // Its folder is made if missing, as --save's is (runs/stage01.jsonl in a fresh clone).
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::exists(dir, ec) && !std::filesystem::create_directories(dir, ec))
        throw Error("--log " + path + ": cannot create its directory " + dir.string() + " (" + ec.message() + ")");
    // Non-blocking, so that a FIFO nobody reads fails at once instead of hanging the run;
    // /dev/null, a pipe being read and regular files work.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | mode | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        throw Error("--log " + path + ": cannot open for writing (" +
                    (errno == ENXIO ? std::string("a FIFO with no reader") : std::strerror(errno)) + ")");
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    jsonl_ = ::fdopen(fd, "w");
    if (!jsonl_) {
        ::close(fd);
        throw Error("--log " + path + ": cannot open for writing");
    }
}

void Logger::write_line(const std::string& line) {
    if (!jsonl_) return;
    if (std::fputs(line.c_str(), jsonl_) < 0 || std::fflush(jsonl_) != 0 || std::ferror(jsonl_))
        throw Error("--log " + path_ + ": write error (" + std::strerror(errno ? errno : EIO) + ")");
}

Logger::~Logger() {
    if (jsonl_) std::fclose(jsonl_);
}

namespace {
// JSON has no NaN or infinity: write null.
std::string num(double v, const char* format = "%.6g") {
    if (!std::isfinite(v)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof(buf), format, v);
    return buf;
}
}  // namespace

void Logger::step(const StepRecord& r) {
    char mfu[32] = "   n/a";
    if (r.mfu >= 0) std::snprintf(mfu, sizeof(mfu), "%5.1f%%", 100.0 * r.mfu);
    std::printf("step %5d/%d | loss %.4f | lr %.2e | norm %7.4f | %8.1f ms | %9.0f tok/s | MFU %s\n", r.step + 1,
                r.steps, r.loss, r.lr, r.grad_norm, r.ms, r.tokens_per_s, mfu);
    std::fflush(stdout);
    write_line("{\"type\": \"step\", \"step\": " + std::to_string(r.step) + ", \"steps\": " +
               std::to_string(r.steps) + ", \"loss\": " + num(r.loss, "%.9g") + ", \"lr\": " + num(r.lr) +
               ", \"grad_norm\": " + num(r.grad_norm) + ", \"ms\": " + num(r.ms) +
               ", \"tokens_per_s\": " + num(r.tokens_per_s) + ", \"mfu\": " + (r.mfu >= 0 ? num(r.mfu) : "null") +
               "}\n");
}

void Logger::validation(int step, float val_loss) {
    std::printf("step %5d | val loss %.4f\n", step + 1, val_loss);
    std::fflush(stdout);
    write_line("{\"type\": \"val\", \"step\": " + std::to_string(step) + ", \"val_loss\": " +
               num(val_loss, "%.9g") + "}\n");
}

void Logger::hellaswag(int step, double accuracy, int64_t correct, int64_t examples, double seconds) {
    if (step >= 0)
        std::printf("step %5d | hellaswag %.4f (%lld of %lld examples, %.1f s)\n", step + 1, accuracy,
                    static_cast<long long>(correct), static_cast<long long>(examples), seconds);
    else
        std::printf("hellaswag  accuracy %.4f (%lld of %lld examples right) in %.1f s\n", accuracy,
                    static_cast<long long>(correct), static_cast<long long>(examples), seconds);
    std::fflush(stdout);
    write_line("{\"type\": \"hellaswag\", \"step\": " + (step >= 0 ? std::to_string(step) : "null") +
               ", \"accuracy\": " + num(accuracy, "%.9g") + ", \"correct\": " + std::to_string(correct) +
               ", \"examples\": " + std::to_string(examples) + ", \"seconds\": " + num(seconds) + "}\n");
}

void Logger::sample(int step, const std::string& text) {
    std::printf("step %5d | sample:\n---\n%s\n---\n", step + 1, text.c_str());
    std::fflush(stdout);
    write_line("{\"type\": \"sample\", \"step\": " + std::to_string(step) + ", \"text\": " + json_string(text) +
               "}\n");
}

void Logger::event(const std::string& type, const std::string& json_fields) {
    write_line("{\"type\": " + json_string(type) + (json_fields.empty() ? "" : ", ") + json_fields + "}\n");
}

std::string Logger::json_string(const std::string& s) { return gpt::json_string(s); }

}  // namespace gpt
