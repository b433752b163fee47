#include "train/logger.h"

#include <cmath>

#include "util/error.h"

namespace gpt {

Logger::Logger(const std::string& path) {
    if (path.empty()) return;
    jsonl_ = std::fopen(path.c_str(), "w");
    if (!jsonl_) throw Error("--log " + path + ": cannot open for writing");
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
    if (jsonl_) {
        std::fprintf(jsonl_,
                     "{\"type\": \"step\", \"step\": %d, \"steps\": %d, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
                     "\"ms\": %s, \"tokens_per_s\": %s, \"mfu\": %s}\n",
                     r.step, r.steps, num(r.loss, "%.9g").c_str(), num(r.lr).c_str(), num(r.grad_norm).c_str(),
                     num(r.ms).c_str(), num(r.tokens_per_s).c_str(), r.mfu >= 0 ? num(r.mfu).c_str() : "null");
        std::fflush(jsonl_);
    }
}

void Logger::validation(int step, float val_loss) {
    std::printf("step %5d | val loss %.4f\n", step + 1, val_loss);
    std::fflush(stdout);
    if (jsonl_) {
        std::fprintf(jsonl_, "{\"type\": \"val\", \"step\": %d, \"val_loss\": %s}\n", step,
                     num(val_loss, "%.9g").c_str());
        std::fflush(jsonl_);
    }
}

void Logger::sample(int step, const std::string& text) {
    std::printf("step %5d | sample:\n---\n%s\n---\n", step + 1, text.c_str());
    std::fflush(stdout);
    if (jsonl_) {
        std::fprintf(jsonl_, "{\"type\": \"sample\", \"step\": %d, \"text\": %s}\n", step, json_string(text).c_str());
        std::fflush(jsonl_);
    }
}

void Logger::event(const std::string& type, const std::string& json_fields) {
    if (!jsonl_) return;
    std::fprintf(jsonl_, "{\"type\": %s%s%s}\n", json_string(type).c_str(), json_fields.empty() ? "" : ", ",
                 json_fields.c_str());
    std::fflush(jsonl_);
}

std::string Logger::json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);  // UTF-8 passes through
                }
        }
    }
    return out + "\"";
}

}  // namespace gpt
