// gpt_launch: starts N copies of a trainer on one machine, one per GPU, with the environment
// torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so
// a multi-GPU run needs no MPI. When one copy fails, the others end: the trainers' watchdog
// (dist/watchdog.h) stops them within seconds, with a line naming the rank that failed, and
// gpt_launch stops any that remain (a copy that ends with kExitStoppedByPeer is not the failure
// it reports). Without that, the rest would wait forever for the dead rank in their next
// collective.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/watchdog.h"
#include "util/cli.h"
#include "util/error.h"

namespace {

constexpr int kMaxProcs = 1024;
// After a failure, how long the others get to end on their own: a trainer's watchdog stops it
// within seconds, with a line naming the rank that failed, which a SIGTERM would cut off.
constexpr unsigned kSettleSeconds = 5;
constexpr unsigned kGraceSeconds = 10;  // after SIGTERM, how long the others get before SIGKILL

// The children's pids, read by the signal handlers (0: not started, or already reaped). A
// handler may only touch plain flags like these, so they are sig_atomic_t.
volatile sig_atomic_t g_pids[kMaxProcs];
volatile sig_atomic_t g_signal = 0;  // the SIGINT or SIGTERM the launcher received, 0 if none
volatile sig_atomic_t g_terminated = 0;  // 1 once the rest were sent SIGTERM after a failure

// Each child leads its own process group, and a signal goes to the whole group: a COMMAND that
// is a script wrapping the trainer stops too, not just the shell running it.
void signal_all(int sig) {
    for (int i = 0; i < kMaxProcs; ++i)
        if (g_pids[i] > 0) kill(-static_cast<pid_t>(g_pids[i]), sig);
}

void forward(int sig) {  // SIGINT, SIGTERM: the children decide how to stop
    g_signal = sig;
    signal_all(sig);
}

// SIGALRM after a failure: the settling time is over, SIGTERM; then the grace period, SIGKILL.
void stop_the_rest(int) {
    if (!g_terminated) {
        g_terminated = 1;
        signal_all(SIGTERM);
        alarm(kGraceSeconds);
    } else {
        signal_all(SIGKILL);
    }
}

struct Launch {
    int nproc = 0, nnodes = 1, node_rank = 0, port = 0;
    std::string master_addr;
    std::vector<char*> command;  // COMMAND ARGS... and the null execvp wants
};

// A TCP port nobody listens on now. Another program may take it before rank 0 binds it; that is
// unlikely, and --port avoids it.
int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw gpt::Error(std::string("cannot open a socket to find a free port: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // the kernel picks a free one
    socklen_t len = sizeof(addr);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    const int err = errno;
    close(fd);
    if (!ok) throw gpt::Error(std::string("cannot find a free port on 127.0.0.1: ") + std::strerror(err));
    return ntohs(addr.sin_port);
}

// Starts local rank `local`; returns its pid, or 0 and sets `error` when it could not run. A
// failed execvp happens in the child, so the child reports its errno through a pipe that a
// successful exec closes (FD_CLOEXEC): end of file means the command is running.
pid_t start(const Launch& l, int local, int* error) {
    int fds[2];
    if (pipe(fds) != 0) {
        *error = errno;
        return 0;
    }
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);  // the next children must not inherit this one's pipe
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        // The launcher blocks signals while it starts the children; a child starts clean.
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        // Its own group, so Ctrl-C on the terminal reaches only the launcher, which passes it on.
        setpgid(0, 0);
#ifdef __linux__
        // If the launcher itself is killed (SIGKILL cannot be passed on), its children follow.
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(143);
#endif
        const auto set = [](const char* name, long value) { setenv(name, std::to_string(value).c_str(), 1); };
        set("RANK", static_cast<long>(l.node_rank) * l.nproc + local);
        set("WORLD_SIZE", static_cast<long>(l.nnodes) * l.nproc);
        set("LOCAL_RANK", local);
        set("LOCAL_WORLD_SIZE", l.nproc);
        set("MASTER_PORT", l.port);
        setenv("MASTER_ADDR", l.master_addr.c_str(), 1);
        execvp(l.command[0], l.command.data());
        const int err = errno;
        ssize_t written = write(fds[1], &err, sizeof(err));
        (void)written;  // nothing more to do if even this fails: the parent sees exit 127
        _exit(127);
    }
    if (pid < 0) *error = errno;
    close(fds[1]);
    ssize_t n = 0;
    while (pid > 0 && (n = read(fds[0], error, sizeof(*error))) < 0 && errno == EINTR) {
    }
    close(fds[0]);
    if (pid < 0) return 0;
    if (n != static_cast<ssize_t>(sizeof(*error))) return pid;  // exec'd
    waitpid(pid, nullptr, 0);  // the child that could not exec has exited 127
    return 0;
}

std::string the_others(int n) { return n == 1 ? "the other process" : "the other " + std::to_string(n) + " processes"; }

// Starts the children, waits for all of them, and returns the launcher's exit status.
int run(const Launch& l) {
    struct sigaction sa{};
    sa.sa_handler = forward;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sa.sa_handler = stop_the_rest;
    sigaction(SIGALRM, &sa, nullptr);

    int live = 0;               // children not yet reaped
    int failed_rank = -1;       // the first rank to fail, global; -1 while none has
    int status = 0;             // what gpt_launch exits with
    std::string what;           // "rank 2 exited with status 1"
    bool after_signal = false;  // it followed a SIGINT/SIGTERM we passed on
    // After the failure: the others that ended on their own (a trainer's watchdog stopped them),
    // and those gpt_launch stopped.
    int ended_themselves = 0, stopped = 0;
    // A rank that ended with kExitStoppedByPeer (its watchdog stopped it because another failed)
    // is not the failure to report: the one that failed ends on its own, soon after.
    int first_stopped = -1;
    bool settling = false;  // the alarm that stops the rest is set
    const auto settle_then_stop = [&] {
        if (settling || live == 0) return;
        settling = true;
        alarm(kSettleSeconds);  // then stop_the_rest
    };
    const auto fail = [&](int rank, int code, const std::string& why) {
        if (failed_rank >= 0) return;  // only the first failure counts; the rest follow from it
        failed_rank = rank;
        status = code;
        what = why;
        after_signal = g_signal != 0;
        settle_then_stop();
    };

    // Signals wait until every child is started and its pid recorded, so that none misses one.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    for (int local = 0; local < l.nproc && failed_rank < 0; ++local) {
        const int rank = l.node_rank * l.nproc + local;
        int err = 0;
        if (const pid_t pid = start(l, local, &err)) {
            g_pids[local] = pid;
            ++live;
        } else if (err == ENOENT || err == EACCES || err == ENOEXEC || err == ENOTDIR) {
            // 127 and 126, as a shell reports a command it cannot find or cannot run
            fail(rank, err == ENOENT ? 127 : 126, std::string("cannot run ") + l.command[0] + ": " + std::strerror(err));
        } else {
            fail(rank, 1, "cannot start rank " + std::to_string(rank) + ": " + std::strerror(err));
        }
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);

    while (live > 0) {
        // WNOWAIT: find which child ended but leave it a zombie until its pid is cleared, since
        // once reaped its pid may go to another process that a handler must never signal.
        siginfo_t info{};
        if (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) != 0) {
            if (errno == EINTR) continue;
            std::fprintf(stderr, "gpt_launch: waiting for the processes: %s\n", std::strerror(errno));
            return 1;
        }
        int local = 0;
        while (local < l.nproc && g_pids[local] != info.si_pid) ++local;
        if (local < l.nproc) g_pids[local] = 0;
        int wstatus = 0;
        while (waitpid(info.si_pid, &wstatus, 0) < 0 && errno == EINTR) {
        }
        if (local == l.nproc) continue;  // not one of ours (cannot happen)
        --live;
        const int rank = l.node_rank * l.nproc + local;
        if (failed_rank >= 0) {  // one of the rest, after the failure
            ++(g_terminated ? stopped : ended_themselves);
            continue;
        }
        if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == gpt::dist::kExitStoppedByPeer) {
            ++ended_themselves;
            if (first_stopped < 0) first_stopped = rank;
            settle_then_stop();  // should the one that failed not end, the rest are stopped
        } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
            fail(rank, WEXITSTATUS(wstatus),
                 "rank " + std::to_string(rank) + " exited with status " + std::to_string(WEXITSTATUS(wstatus)));
        } else if (WIFSIGNALED(wstatus)) {
            const int sig = WTERMSIG(wstatus);
            fail(rank, 128 + sig,
                 "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(sig) + " (" +
                     strsignal(sig) + ")");
        }
    }
    alarm(0);

    const int sig = g_signal;
    if (sig != 0 && (failed_rank < 0 || after_signal)) {
        // Ctrl-C or a kill: the children ending on it is no failure of theirs.
        std::fprintf(stderr, "gpt_launch: stopped by %s, passed on to every process\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        return failed_rank >= 0 ? status : 128 + sig;
    }
    if (failed_rank < 0 && first_stopped >= 0) {  // the one that failed was never seen to
        failed_rank = first_stopped;
        status = gpt::dist::kExitStoppedByPeer;
        what = "rank " + std::to_string(first_stopped) + " stopped because another process failed (status " +
               std::to_string(status) + ")";
        --ended_themselves;
    }
    if (failed_rank >= 0) {
        if (ended_themselves > 0)
            what += "; " + std::string(ended_themselves == 1 ? "1 other" : std::to_string(ended_themselves) + " others") +
                    " stopped because of it";
        if (stopped > 0) what += "; stopped " + the_others(stopped);
        std::fprintf(stderr, "gpt_launch: %s\n", what.c_str());
    }
    return status;
}

}  // namespace

int main(int argc, char** argv) {
    Launch l;
    try {
        std::vector<gpt::cli::Option> options = {
            gpt::cli::required(gpt::cli::whole("--nproc", "N", "processes to start on this machine, one per GPU",
                                               l.nproc, 1, kMaxProcs)),
            gpt::cli::whole("--port", "P", "MASTER_PORT, where rank 0 listens", l.port, 1, 65535),
            gpt::cli::text("--master-addr", "A", "MASTER_ADDR, the address of rank 0's machine", l.master_addr),
            gpt::cli::whole("--nnodes", "K", "machines taking part, each running gpt_launch", l.nnodes, 1, kMaxProcs),
            gpt::cli::whole("--node-rank", "R", "this machine's place among them, 0 to K-1", l.node_rank, 0,
                            kMaxProcs - 1),
        };
        options[1].show = [] { return std::string("a free port"); };
        options[2].show = [] { return std::string("127.0.0.1"); };

        // Everything after the first "--" is the command, its own options included.
        int split = 1;
        while (split < argc && std::strcmp(argv[split], "--") != 0) ++split;
        const gpt::cli::Parsed parsed = gpt::cli::parse(split, argv, options, true);
        if (parsed.help) {
            std::printf(
                "usage: gpt_launch --nproc N [--port P] [--master-addr A] [--node-rank R --nnodes K] -- COMMAND "
                "[ARGS...]\n\n"
                "Starts N copies of COMMAND, one per GPU, with the environment torchrun sets: RANK (global),\n"
                "WORLD_SIZE (N*K), LOCAL_RANK, LOCAL_WORLD_SIZE (N), MASTER_ADDR and MASTER_PORT. Their output\n"
                "passes through unchanged (the trainer keeps ranks above 0 quiet). When one fails, the others get\n"
                "%u s to end on their own (a trainer's watchdog stops it, naming the rank that failed), then\n"
                "SIGTERM, then SIGKILL after %u s, and gpt_launch exits with the failing rank's status (128 +\n"
                "the signal if it was killed; 127 if COMMAND cannot be found). A trainer that exits with %d was\n"
                "stopped by its watchdog because another rank failed: gpt_launch reports that other rank.\n"
                "SIGINT and SIGTERM are passed on to every copy. On several machines, run it on each with the\n"
                "same --nnodes, --master-addr (node 0's address) and --port, and --node-rank 0 to K-1.\n\n"
                "example: gpt_launch --nproc 8 -- build/stage06/stages/train_06_multi_gpu_mfu --total-batch 524288\n\n"
                "options (default in brackets):\n%s",
                kSettleSeconds, kGraceSeconds, gpt::dist::kExitStoppedByPeer, gpt::cli::describe(options).c_str());
            return 0;
        }
        if (!parsed.operands.empty())
            throw gpt::Error("unexpected argument '" + parsed.operands[0] + "': the command goes after -- (see --help)");
        if (split + 1 >= argc)
            throw gpt::Error(split == argc ? "no command: give it after --, as in gpt_launch --nproc 2 -- build/stage06/stages/train_06_multi_gpu_mfu"
                                           : "no command after --");
        if (l.node_rank >= l.nnodes)
            throw gpt::Error("option --node-rank: " + std::to_string(l.node_rank) + " is not below --nnodes " +
                             std::to_string(l.nnodes));
        // Every machine must name the same rendezvous; a default would differ from one to the next.
        if (l.nnodes > 1 && (l.port == 0 || l.master_addr.empty()))
            throw gpt::Error("--nnodes " + std::to_string(l.nnodes) +
                             " needs --master-addr and --port, the same on every machine");
        if (l.master_addr.empty()) l.master_addr = "127.0.0.1";
        if (l.port == 0) l.port = free_port();
        for (int i = split + 1; i < argc; ++i) l.command.push_back(argv[i]);
        l.command.push_back(nullptr);
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return run(l);
}
