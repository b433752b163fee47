// Ctrl-C (SIGINT) or SIGTERM while one process trains: the step under way finishes, the run
// saves its checkpoint (with --save) and stops, so that --resume continues it where it stopped;
// a second signal ends the process at once, as the default would have. A job scheduler that
// sends SIGTERM before it kills a job gets the same: the last step is kept.
//
// With several processes the signals keep their default (the launcher passes them to every
// process, and a stop the processes do not agree on would hang them): only a checkpoint
// already saved (--save-every) survives there.
#pragma once
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <memory>

#include "util/signals.h"

namespace gpt {

class StopRequest {
  public:
    explicit StopRequest(bool active) {
        if (!active) return;
        requested_ = 0;
        catcher_ = std::make_unique<CatchStopSignals>(on_signal);
    }
    StopRequest(const StopRequest&) = delete;
    StopRequest& operator=(const StopRequest&) = delete;

    // The signal that asked the run to stop (SIGINT or SIGTERM), 0 if none did.
    int signal() const { return requested_; }
    const char* signal_name() const { return requested_ == SIGTERM ? "SIGTERM" : "SIGINT"; }
    // A signal that reached a checkpoint being saved (which handles them itself) asked the same.
    void request(int sig) {
        if (catcher_ && requested_ == 0) requested_ = sig;
    }

  private:
    // Async-signal-safe: a flag, a write(2), and for the second signal the default action.
    static void on_signal(int sig) {
        if (requested_ != 0) {
            ::signal(sig, SIG_DFL);
            ::raise(sig);
            return;
        }
        requested_ = sig;
        static const char kText[] =
            "\nstopping after this step (saving it with --save); press Ctrl-C again to stop at once\n";
        const ssize_t ignored = ::write(STDOUT_FILENO, kText, sizeof(kText) - 1);
        (void)ignored;
    }

    static inline volatile std::sig_atomic_t requested_ = 0;
    std::unique_ptr<CatchStopSignals> catcher_;  // none with several processes
};

}  // namespace gpt
