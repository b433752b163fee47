#include "dist/watchdog.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

#include "util/file.h"

namespace gpt::dist {

namespace {

using Clock = std::chrono::steady_clock;

long long now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

constexpr int kPollMs = 100;           // how often the watchdog looks
constexpr int kPeerLostWaitMs = 2000;  // how long a lost connection waits for the reason to arrive
// How long aborting the device's collectives may take before the process ends all the same.
// (NCCL's abort can wait for CUDA Graphs that captured its operations, which only the ending
// process would free.)
constexpr int kAbortMs = 3000;
// A process stopped because another failed ends no sooner than this after the abort's bound
// (where there is a device to abort): later than the one that failed can, so that launchers that
// name the first process to exit (mpirun, srun, torchrun) name the one that failed.
constexpr int kStoppedExitDelayMs = 1000;
// The start-up (loading, meeting, NCCL's start) gets at least this long, whatever --step-timeout.
constexpr double kStartUpLimitS = 600;
constexpr int kFinished = 1, kFailed = 2;

// Ends the process at once, from any thread: no unwinding, so a checkpoint being written would
// leave its PATH.tmp behind; it is removed first.
[[noreturn]] void end_process(int status) {
    remove_unfinished_save();
    std::_Exit(status);
}

// "rank 3: lost the connection ..." from rank 3 loses its "rank 3: ", which the line adds again.
std::string without_rank(const std::string& message, int rank) {
    for (const std::string& prefix : {"rank " + std::to_string(rank) + ": ", "rank " + std::to_string(rank) + " of "}) {
        if (message.compare(0, prefix.size(), prefix) != 0) continue;
        if (prefix.back() == ' ' && prefix[prefix.size() - 2] == ':') return message.substr(prefix.size());
        const size_t colon = message.find(": ", prefix.size());
        if (colon != std::string::npos) return message.substr(colon + 2);
    }
    return message;
}

}  // namespace

// What goes over a failure connection: a process is done (a clean end), or rank `origin` failed.
struct Watchdog::Notice {
    uint32_t magic = 0x47505446;  // "GPTF"
    int32_t kind = 0, origin = 0;
    char text[1024] = {};
};

Watchdog::Watchdog(Group& group, double time_limit_s, Hooks hooks)
    : group_(group), time_limit_s_(std::min(time_limit_s, 1e9)), hooks_(std::move(hooks)),
      finished_(group.world(), false), closed_(group.world(), false), received_(group.world()) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        what_ = "the start-up";
        const double limit = time_limit_s_ > 0 ? std::max(time_limit_s_, kStartUpLimitS) : 0;
        deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long long>(limit * 1000));
    }
    // The thread takes no signals: SIGINT or SIGTERM (a checkpoint being written handles them)
    // must not interrupt its reads, and go to the main thread as before.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    thread_ = std::thread([this] { watch(); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

Watchdog::~Watchdog() {
    const bool ending = ending_;
    stop_ = true;  // from now on, nothing the others say changes how this process ends
    if (!ending) {
        // Unwinding from an error that did not go through fail(): the others must not take this
        // for a clean end and wait. Otherwise the run ended as it should.
        if (std::uncaught_exceptions() > 0)
            tell_others(group_.rank(), "the process stopped on an error (its own output says which)", -1);
        else
            tell_others(group_.rank(), "", -1);
    }
    thread_.join();
}

void Watchdog::start(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    what_ = what;
    deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long long>(time_limit_s_ * 1000));
}

void Watchdog::hold_if_ending() {
    while (ending_) std::this_thread::sleep_for(std::chrono::seconds(1));
}

std::string Watchdog::line(int origin, const std::string& message) const {
    const std::string me = "rank " + std::to_string(group_.rank()) + " of " + std::to_string(group_.world());
    if (origin == group_.rank()) return "error: " + me + ": " + without_rank(message, origin);
    return "error: " + me + ": stopping, because rank " + std::to_string(origin) +
           " failed: " + without_rank(message, origin);
}

// Sends the news to the processes this one is connected to: rank 0 to every other (but the one
// it came from), the others to rank 0, which passes it on. An empty message: a clean end.
void Watchdog::tell_others(int origin, const std::string& message, int except) {
    Notice n;
    n.kind = message.empty() ? kFinished : kFailed;
    n.origin = origin;
    std::snprintf(n.text, sizeof(n.text), "%s", without_rank(message, origin).c_str());
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<int>& sockets = group_.control_sockets();
    for (int r = 0; r < int(sockets.size()); ++r)
        if (sockets[r] >= 0 && r != except && r != group_.rank())
            (void)::send(sockets[r], &n, sizeof(n), MSG_NOSIGNAL);  // a peer already gone needs no news
}

bool Watchdog::claim() {
    bool expected = false;
    return ending_.compare_exchange_strong(expected, true);
}

void Watchdog::fail(const std::string& message, bool peer_lost) {
    if (peer_lost)  // the watchdog may be reading why at this moment
        for (int waited = 0; waited < kPeerLostWaitMs && !ending_; waited += 10)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!claim()) {
        // Another process's failure came first: the watchdog is ending this one.
        std::this_thread::sleep_for(std::chrono::milliseconds(kAbortMs + 5000));
        end_process(kExitStoppedByPeer);
    }
    failed_at_ms_ = now_ms();  // from now, the watchdog ends the process if the abort hangs
    std::fprintf(stderr, "%s\n", line(group_.rank(), message).c_str());
    std::fflush(nullptr);  // before the abort, which may not return (the watchdog then ends the process)
    tell_others(group_.rank(), message, -1);
    if (hooks_.abort) hooks_.abort();
    // At once: what unwinding would still do is shut down the communication (MPI_Finalize waits
    // for the others), and a launcher should see this process end first.
    end_process(1);
}

void Watchdog::end_run(int origin, const std::string& message) {
    if (!claim()) return;  // this process's own failure is being handled
    std::fprintf(stderr, "%s\n", line(origin, message).c_str());
    std::fflush(stderr);
    // The news of another process is passed on by rank 0 only (the others heard it from rank 0).
    if (origin == group_.rank() || group_.rank() == 0) tell_others(origin, message, origin);
    abort_and_exit(origin == group_.rank() ? 1 : kExitStoppedByPeer);
}

void Watchdog::abort_and_exit(int status) {
    const long long began = now_ms();
    // The abort runs beside, so that an abort that hangs cannot keep the process alive.
    auto done = std::make_shared<std::atomic<bool>>(false);
    if (hooks_.abort)
        std::thread([abort = hooks_.abort, done] {
            abort();
            *done = true;
        }).detach();
    else
        *done = true;
    for (int waited = 0; waited < kAbortMs && !*done; waited += 10)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int delay = kStoppedExitDelayMs + (hooks_.abort ? kAbortMs : 0);
    if (status == kExitStoppedByPeer)
        while (now_ms() - began < delay) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    end_process(status);
}

void Watchdog::watch() {
    const std::vector<int>& sockets = group_.control_sockets();
    while (!stop_) {
        if (ending_) {  // this process's own failure: it ends by itself, unless the abort hangs
            if (failed_at_ms_ > 0 && now_ms() - failed_at_ms_ > kAbortMs) end_process(1);
            std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
            continue;
        }
        std::vector<pollfd> fds;
        std::vector<int> peers;
        for (int r = 0; r < int(sockets.size()); ++r)
            if (sockets[r] >= 0 && !closed_[r]) {
                fds.push_back({sockets[r], POLLIN, 0});
                peers.push_back(r);
            }
        if (fds.empty())
            std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
        else if (::poll(fds.data(), fds.size(), kPollMs) < 0 && errno != EINTR)
            end_run(group_.rank(), std::string("the watchdog cannot watch the other processes: ") + std::strerror(errno));
        for (size_t i = 0; i < fds.size() && !stop_ && !ending_; ++i)
            if (fds[i].revents) read_from(peers[i]);
        if (stop_) break;
        if (ending_) continue;
        if (hooks_.device_error) {
            // A peer that failed usually shows here too (NCCL: remote process exited): its own
            // news, or the end of its connection, gets a moment to arrive and name it first.
            const std::string error = hooks_.device_error();
            if (error.empty())
                device_error_since_ms_ = 0;
            else if (device_error_since_ms_ == 0)
                device_error_since_ms_ = now_ms();
            else if (now_ms() - device_error_since_ms_ > kPeerLostWaitMs)
                end_run(group_.rank(), error);
        }
        // Once every other process has ended cleanly, no one waits for this one (rank 0 writing
        // the last checkpoint): the time limit no longer applies.
        bool others = false, all_finished = true;
        for (int r = 0; r < int(sockets.size()); ++r)
            if (sockets[r] >= 0) {
                others = true;
                all_finished = all_finished && finished_[r];
            }
        std::string what;
        bool late = false;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            late = time_limit_s_ > 0 && Clock::now() > deadline_ && !(others && all_finished);
            what = what_;
        }
        if (late) {
            char limit[32];
            std::snprintf(limit, sizeof(limit), "%g", time_limit_s_);
            end_run(group_.rank(), what + " has not finished within " + limit + " s (--step-timeout " + limit +
                                       "): a process hangs, or waits in a collective for one that does");
        }
    }
}

// What a peer's failure connection holds now, without waiting: whole notices are acted on, a
// part waits for the rest, the end of the connection without a clean end is a failure.
void Watchdog::read_from(int peer) {
    std::string& got = received_[peer];
    for (;;) {
        char buf[sizeof(Notice)];
        const ssize_t n = ::recv(group_.control_sockets()[peer], buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            got.append(buf, size_t(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        bool open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        while (got.size() >= sizeof(Notice)) {
            Notice notice;
            std::memcpy(&notice, got.data(), sizeof(notice));
            got.erase(0, sizeof(notice));
            notice.text[sizeof(notice.text) - 1] = '\0';
            if (notice.magic != Notice{}.magic) {  // not ours: as good as a closed connection
                open = false;
                break;
            }
            if (notice.kind == kFinished) {
                finished_[peer] = true;
            } else {
                end_run(notice.origin, notice.text);
                return;
            }
        }
        if (open) return;
        closed_[peer] = true;  // the connection ended
        // Ctrl-C reaches every process of a launcher at once: the others end on it, and this one,
        // writing a checkpoint, says so itself (the save reports "interrupted") and ends.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        if (signal_during_save() != 0) return;
        if (!finished_[peer])
            end_run(peer, "the process ended without a word (killed by a signal, out of memory, or its machine "
                          "went down?)");
        return;
    }
}

}  // namespace gpt::dist
