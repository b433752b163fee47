// When one process of a run fails, every other one stops within seconds, and says which failed.
//
// Without this, a failure ends one process and leaves the others waiting for it in their next
// collective, forever: a TCP receive (the CPU reference) or a GPU kernel spinning on an NCCL
// operation (stage 06), which no error ever reaches. So each process runs a watchdog thread that
// watches what the waiting main thread cannot:
//
//   - the failure connections of the group (dist/group.h, rank 0 in the middle): a process that
//     fails sends its message there before anything else; rank 0 passes it on to the others. A
//     connection that ends without a word means a process was killed (SIGKILL, out of memory);
//   - the device's own error (NCCL's asynchronous error, ncclCommGetAsyncError);
//   - a time limit per step (--step-timeout): what nothing reports, a process that hangs.
//
// On any of them, the watchdog prints one line naming the process that failed, aborts the
// device's collectives (ncclCommAbort: it waits for no one, and gets 3 s) and ends the process:
// with status 1 where the failure is this process's own, kExitStoppedByPeer (a few seconds
// later) where it is another's. PyTorch's
// equivalent is the NCCL watchdog of ProcessGroupNCCL (TORCH_NCCL_ASYNC_ERROR_HANDLING) and
// init_process_group(timeout=...).
#pragma once
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/group.h"

namespace gpt::dist {

// The exit status of a process that the watchdog stopped because another one failed: the
// launcher (gpt_launch) then reports the process that failed first, not this one.
constexpr int kExitStoppedByPeer = 75;  // EX_TEMPFAIL: nothing wrong with this process itself

class Watchdog {
  public:
    struct Hooks {
        // What went wrong in the device's collectives on their own, or "" while nothing has.
        std::function<std::string()> device_error;
        // Stops this process's device collectives at once, without waiting for the others.
        std::function<void()> abort;
    };

    // Watches `group` from a thread of its own. time_limit_s: how long one step (from one call
    // of start() to the next) may take, 0 for no limit; the start-up, until the first start(),
    // gets at least 10 minutes.
    Watchdog(Group& group, double time_limit_s, Hooks hooks);
    // A clean end: the others are told, so that this process leaving is no failure.
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    // This process starts `what` ("step 12"): its time limit counts from now.
    void start(const std::string& what);

    // This process failed with `message`: prints it on stderr (with the rank), tells the others,
    // aborts the device's collectives and ends the process (status 1). When the message is only
    // that a peer is gone (PeerLost), the watchdog first gets a moment to learn why from rank 0;
    // if another process's failure came first, the watchdog ends this process instead.
    [[noreturn]] void fail(const std::string& message, bool peer_lost);

    // Parks the calling thread for good while the watchdog is ending this process (another one
    // failed): what the device computed after the abort must not be used, nor saved.
    void hold_if_ending();

  private:
    struct Notice;
    void watch();
    void read_from(int peer);
    void end_run(int origin, const std::string& message);  // the watchdog's own verdict: never returns
    bool claim();                                           // the first failure of this process only
    void tell_others(int origin, const std::string& message, int except);
    std::string line(int origin, const std::string& message) const;
    [[noreturn]] void abort_and_exit(int status);

    Group& group_;
    const double time_limit_s_;
    Hooks hooks_;
    std::mutex mutex_;  // guards the failure connections' sends, what_ and deadline_
    std::string what_ = "the start-up";
    std::chrono::steady_clock::time_point deadline_;
    std::vector<bool> finished_, closed_;  // per peer, the watchdog thread's only
    std::vector<std::string> received_;     // per peer, a notice that has not all arrived
    std::atomic<bool> ending_{false}, stop_{false};
    std::atomic<long long> failed_at_ms_{0};  // when this process's own failure began (0: none)
    long long device_error_since_ms_ = 0;     // when the device first reported an error (0: none)
    std::thread thread_;
};

// What a watchdog adds to a `Parallel` (train/parallel.h): its three calls, which do nothing
// where no watchdog runs (one process; tests that run ranks as threads). The Parallel starts it
// with watch() once its group has met, and stops it with unwatch() before the group goes.
class Watched {
  public:
    void starting(const std::string& what) {
        if (watchdog_) watchdog_->start(what);
    }
    void fail(const std::exception& error) {
        if (watchdog_) watchdog_->fail(error.what(), dynamic_cast<const PeerLost*>(&error) != nullptr);
    }
    void hold_if_stopping() {
        if (watchdog_) watchdog_->hold_if_ending();
    }

  protected:
    void watch(Group& group, double time_limit_s, Watchdog::Hooks hooks = {}) {
        watchdog_ = std::make_unique<Watchdog>(group, time_limit_s, std::move(hooks));
    }
    void unwatch() { watchdog_.reset(); }
    bool watched() const { return watchdog_ != nullptr; }

  private:
    std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace gpt::dist
