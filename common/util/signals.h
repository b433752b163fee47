// SIGINT (Ctrl-C) and SIGTERM caught for a while: by a checkpoint being saved (util/file.h), by
// gpt_prepare (which then removes what it wrote) and by a training run (train/stop_request.h).
#pragma once
#include <signal.h>

namespace gpt {

// For its life, SIGINT and SIGTERM call `handler` (which must be async-signal-safe: set a flag)
// instead of what they did before, which comes back when it ends.
class CatchStopSignals {
  public:
    explicit CatchStopSignals(void (*handler)(int)) {
        struct sigaction action = {};
        action.sa_handler = handler;
        action.sa_flags = SA_RESTART;  // a read or write under way goes on instead of failing (EINTR)
        sigemptyset(&action.sa_mask);
        sigaction(SIGINT, &action, &old_int_);
        sigaction(SIGTERM, &action, &old_term_);
    }
    ~CatchStopSignals() {
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }
    CatchStopSignals(const CatchStopSignals&) = delete;
    CatchStopSignals& operator=(const CatchStopSignals&) = delete;

  private:
    struct sigaction old_int_ = {}, old_term_ = {};
};

}  // namespace gpt
