// Training output: one line per step on stdout, and the same as JSON Lines with --log.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

namespace gpt {

struct StepRecord {
    int step = 0;         // 0-based
    int steps = 0;        // total
    float loss = 0;
    float lr = 0;
    float grad_norm = 0;
    double ms = 0;
    double tokens_per_s = 0;
    double mfu = -1;      // fraction of the device's peak; < 0 when the peak is unknown
};

class Logger {
  public:
    // Opens (creates or truncates) the JSON Lines file now, so that a path that cannot be
    // written fails before training starts; empty path: stdout only.
    // `continues`: a resumed run's log, appended to (drop_lines_after() first).
    explicit Logger(const std::string& jsonl_path, bool continues = false);
    // The log as its run was when it saved the checkpoint of `steps_taken` steps: the lines of
    // later steps (logged after that save, by a run that then failed) dropped. Returns how many.
    int drop_lines_after(int steps_taken);
    ~Logger();
    Logger(const Logger&) = delete;
    Logger& operator=(const Logger&) = delete;

    void step(const StepRecord& r);
    void validation(int step, float val_loss);
    void sample(int step, const std::string& text);
    // HellaSwag accuracy after `step` (0-based), or of weights alone (step < 0: no training).
    void hellaswag(int step, double accuracy, int64_t correct, int64_t examples, double seconds);
    // Any other event: "key": value pairs already formatted as JSON (e.g. "\"x\": 1").
    void event(const std::string& type, const std::string& json_fields);

    static std::string json_string(const std::string& s);

  private:
    void open(int mode);  // O_TRUNC or O_APPEND
    void write_line(const std::string& line);  // throws gpt::Error on a write error (disk full)
    std::string path_;
    FILE* jsonl_ = nullptr;
};

}  // namespace gpt
