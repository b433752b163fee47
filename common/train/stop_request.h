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

    // Whether signals stop the run here (one process), or keep their default.
    bool active() const { return catcher_ != nullptr; }
    // The signal that asked the run to stop (SIGINT or SIGTERM), 0 if none did.
    int signal() const { return requested_; }
    const char* signal_name() const { return requested_ == SIGTERM ? "SIGTERM" : "SIGINT"; }
    // A signal that reached a checkpoint being saved (which handles them itself) asked the same.
    void request(int sig) {
        if (catcher_ && requested_ == 0) requested_ = sig;
    }

  private:
    // Async-signal-safe: a flag, sigaction(2), write(2) and raise(3).
    static void on_signal(int sig) {
        struct sigaction action = {};
        sigemptyset(&action.sa_mask);
        if (requested_ != 0) {  // the second: what the signal does by default, at once
            action.sa_handler = SIG_DFL;
            sigaction(sig, &action, nullptr);
            ::raise(sig);
            return;
        }
        requested_ = sig;
        // Ctrl-C in `./train | tee out.txt` also ends tee: a print to the closed pipe must not
        // end the run before it saves (a write then fails quietly instead).
        action.sa_handler = SIG_IGN;
        sigaction(SIGPIPE, &action, nullptr);
        static const char kText[] = "\nstopping after the step under way (a second signal stops at once)\n";
        const ssize_t ignored = ::write(STDOUT_FILENO, kText, sizeof(kText) - 1);
        (void)ignored;
    }

    static inline volatile std::sig_atomic_t requested_ = 0;
    std::unique_ptr<CatchStopSignals> catcher_;  // none with several processes
};

}  // namespace gpt
