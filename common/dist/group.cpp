#include "dist/group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <utility>

#ifdef GPT_HAVE_MPI
#include <mpi.h>
#endif

namespace gpt::dist {

namespace {

const char* env(const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
    const char* v = env(name);
    if (!v) return fallback;
    char* end = nullptr;
    errno = 0;
    const long x = std::strtol(v, &end, 10);
    if (errno || *end != '\0' || x < 0 || x > 1 << 20)
        throw Error(std::string("environment variable ") + name + "=" + v + " is not a whole number");
    return static_cast<int>(x);
}

double elapsed_s(std::chrono::steady_clock::time_point since) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

constexpr size_t kHostBytes = 256;  // a host name as sent, NUL-padded (POSIX allows 255 bytes)

// What every connection starts with: who is calling, on which of its two connections, the run it
// thinks it belongs to, its machine, and the local rank its launcher gave it.
struct Hello {
    uint32_t magic = 0x47505432;  // "GPT2": the hello of two connections with host names
    int32_t rank = 0, world = 0;
    int32_t channel = 0;  // 0: collectives, 1: failures only
    int32_t launcher_local_rank = -1;
    char host[kHostBytes] = {};
};

std::string this_host() {
    char name[kHostBytes] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0 || !*name) return "localhost";
    return name;
}

}  // namespace

// The launchers' variables, most specific first: RANK/WORLD_SIZE (torchrun, gpt_launch, by hand),
// Open MPI, PMI (MPICH and Intel MPI's mpiexec, srun --mpi=pmi2), then Slurm's own. An MPI
// launcher started inside a Slurm job inherits the job's SLURM_PROCID, so Slurm's come last.
Launch launch_from_environment() {
    Launch l;
    if (env("WORLD_SIZE") || env("RANK")) {
        l.launcher = env("TORCHELASTIC_RUN_ID") ? "torchrun" : "RANK/WORLD_SIZE";
        l.world = env_int("WORLD_SIZE", 1);
        l.rank = env_int("RANK", 0);
        l.local_rank = env_int("LOCAL_RANK", -1);
    } else if (env("OMPI_COMM_WORLD_SIZE")) {
        l.launcher = "mpirun (Open MPI)";
        l.mpi = true;
        l.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
        l.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
        l.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    } else if (env("PMI_SIZE") && env("PMI_RANK")) {
        l.world = env_int("PMI_SIZE", 1);
        l.rank = env_int("PMI_RANK", 0);
        // srun --mpi=pmi2 sets PMI_RANK and the job step's variables of the same process, and no
        // MPI_LOCALRANKID, which MPICH's Hydra always sets. (Under Hydra inside an sbatch script,
        // every process inherits the script's SLURM_PROCID=0, which fits rank 0 alone.)
        const bool srun = !env("MPI_LOCALRANKID") && env("SLURM_STEP_NUM_TASKS") &&
                          env_int("SLURM_STEP_NUM_TASKS", -1) == l.world && env_int("SLURM_PROCID", -1) == l.rank;
        l.launcher = srun ? "srun (pmi2)" : "mpiexec (PMI)";
        l.mpi = !srun;  // srun's processes meet like srun's always do (MASTER_ADDR or GPT_INIT_FILE)
        l.local_rank = env("MPI_LOCALRANKID") ? env_int("MPI_LOCALRANKID", -1)
                       : srun                 ? env_int("SLURM_LOCALID", -1)
                                              : -1;
    } else if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS")) {
        // A job step (srun) knows its own size; SLURM_NTASKS is the whole allocation's, and a
        // process started by the sbatch script itself (no srun) has no step of its own: it is alone.
        l.launcher = env("PMIX_RANK") ? "srun (pmix)" : "srun";
        l.world = env_int("SLURM_STEP_NUM_TASKS", 1);
        l.rank = env_int("SLURM_PROCID", 0);
        l.local_rank = env_int("SLURM_LOCALID", -1);
    }
    if (l.world < 1 || l.rank >= l.world)
        throw Error("launcher environment (" + l.launcher + "): rank " + std::to_string(l.rank) +
                    " is not one of the " + std::to_string(l.world) + " processes of the run");
    return l;
}

bool load_kernels_eagerly_with_several_processes(const Launch& launch) {
    if (launch.world < 2 || std::getenv("CUDA_MODULE_LOADING")) return false;  // one process, or the user's choice
    return ::setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0) == 0;
}

Placement place_by_host(const std::vector<std::string>& hosts, const std::vector<int>& launcher_local_ranks,
                        const std::string& launcher) {
    const int world = static_cast<int>(hosts.size());
    Placement p;
    p.local_rank.resize(world);
    p.local_world.resize(world);
    std::map<std::string, int> on_host;  // processes seen so far on each host
    for (int r = 0; r < world; ++r) p.local_rank[r] = on_host[hosts[r]]++;
    for (int r = 0; r < world; ++r) p.local_world[r] = on_host[hosts[r]];
    p.hosts = static_cast<int>(on_host.size());
    for (int r = 0; r < world && p.disagreement.empty(); ++r) {
        const int said = r < int(launcher_local_ranks.size()) ? launcher_local_ranks[r] : -1;
        if (said >= 0 && said != p.local_rank[r])
            p.disagreement = "rank " + std::to_string(r) + " is local rank " + std::to_string(said) + " by its launcher (" +
                             launcher + ") but local rank " + std::to_string(p.local_rank[r]) + " of the " +
                             std::to_string(p.local_world[r]) + " processes on host '" + hosts[r] +
                             "' by the host names: two machines with one name, one machine under several names "
                             "(containers?), or a launcher variable left over from another job?";
    }
    return p;
}

Group::Group(const Launch& launch) : launch_(launch) {
    if (launch_.world == 1) return;
    if (launch_.rank == 0) {  // two connections per process: more than the usual 1024 files from 500 on
        rlimit files{};
        if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max &&
            files.rlim_cur < rlim_t(2 * launch_.world + 64)) {
            files.rlim_cur = files.rlim_max;
            ::setrlimit(RLIMIT_NOFILE, &files);
        }
    }
    if (launch_.host.empty()) launch_.host = this_host();
    sockets_.assign(launch_.world, -1);
    control_.assign(launch_.world, -1);
    const double timeout = env_int("GPT_INIT_TIMEOUT", 300);
    const std::string who = "rank " + std::to_string(rank()) + " of " + std::to_string(world());

    // Rank 0 listens: on MASTER_PORT (under torchrun, whose store already listens there, the
    // port after it), or on a port the system picks when it tells the others the address
    // itself (file, MPI).
    const char* master_addr = env("MASTER_ADDR");
    const char* init_file = env("GPT_INIT_FILE");
    const bool mpi = !init_file && !master_addr && launch_.mpi;
    // torchrun's agent keeps its store on MASTER_PORT when it says so (PyTorch 2: always).
    const char* agent_store = env("TORCHELASTIC_USE_AGENT_STORE");
    const bool torchrun = launch_.launcher == "torchrun" && agent_store && std::strcmp(agent_store, "True") == 0;
    int master_port = -1;
    if (!init_file && env("MASTER_PORT")) {
        master_port = env_int("MASTER_PORT", -1);
        if (master_port < 1 || master_port > 65535)
            throw Error(who + ": MASTER_PORT=" + env("MASTER_PORT") + " is not a TCP port (1 to 65535)");
        if (torchrun) master_port = master_port < 65535 ? master_port + 1 : master_port - 1;  // "+ 1" below
    }
    int listener = -1, port = 0;
    if (rank() == 0) {
        if (!init_file && !mpi) port = master_port;
        listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int on = 1;
        ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        addr.sin_port = htons(static_cast<uint16_t>(port < 0 ? 0 : port));
        if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
            ::listen(listener, 2 * world()) != 0) {
            const std::string why = std::strerror(errno);
            if (listener >= 0) ::close(listener);
            throw Error(who + ": cannot listen on port " + std::to_string(port) + " (" + why + ")" +
                        (port <= 0  ? ""
                         : torchrun ? " (MASTER_PORT + 1: torchrun's own store holds MASTER_PORT); set GPT_INIT_FILE "
                                      "to a path all nodes see, or give torchrun another --master-port"
                                    : "; choose another MASTER_PORT"));
        }
        socklen_t len = sizeof(addr);
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
        port = ntohs(addr.sin_port);
    }
    // Where the others find rank 0.
    char host[256] = {};
    if (const char* a = env("GPT_INIT_ADDR")) {
        std::snprintf(host, sizeof(host), "%s", a);
    } else if (rank() == 0 && ::gethostname(host, sizeof(host) - 1) != 0) {
        std::snprintf(host, sizeof(host), "127.0.0.1");
    }

    try {
        if (init_file) {
            how_ = "met through " + std::string(init_file);
            if (rank() == 0) {
                // Written whole under another name, then renamed: a reader never sees half of it.
                const std::string tmp = std::string(init_file) + ".tmp" + std::to_string(::getpid());
                {
                    std::ofstream f(tmp);
                    f << host << " " << port << "\n";
                    if (!f) throw Error(who + ": cannot write GPT_INIT_FILE " + tmp);
                }
                if (std::rename(tmp.c_str(), init_file) != 0)
                    throw Error(who + ": cannot write GPT_INIT_FILE " + std::string(init_file) + " (" +
                                std::strerror(errno) + ")");
                struct Remove {  // everyone is here, or the run failed: the next run must not find this address
                    const char* path;
                    ~Remove() { std::remove(path); }
                } forget{init_file};
                accept_from(listener, timeout);
            } else {
                // The file may not exist yet, or still hold the address of an earlier run.
                const auto start = std::chrono::steady_clock::now();
                double next_note = 10;
                for (;;) {
                    std::ifstream f(init_file);
                    std::string h;
                    int p = 0;
                    if (f >> h >> p) {
                        try {
                            connect_to(h, p, 2.0);
                            break;
                        } catch (const Error&) {
                            if (elapsed_s(start) > timeout) throw;
                        }
                    }
                    if (elapsed_s(start) > timeout)
                        throw Error(who + ": GPT_INIT_FILE " + std::string(init_file) + " gave no address of rank 0 "
                                    "within " + std::to_string(int(timeout)) + " s (GPT_INIT_TIMEOUT)");
                    if (elapsed_s(start) > next_note) {
                        std::fprintf(stderr, "%s: waiting for rank 0's address in %s (%d s)\n", who.c_str(),
                                     init_file, int(next_note));
                        next_note += 10;
                    }
                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                }
            }
        } else if (master_addr || !mpi) {
            if (!master_addr || master_port < 0)
                throw Error(who + " (" + launch_.launcher + "): the processes cannot meet: set MASTER_ADDR and "
                            "MASTER_PORT (rank 0's host and a free port), or GPT_INIT_FILE (a path all nodes see)");
            how_ = "met at " + std::string(master_addr) + ":" + std::to_string(master_port) +
                   (!torchrun ? "" : master_port > 1 && env_int("MASTER_PORT", 0) == 65535
                                         ? " (MASTER_PORT - 1, beside torchrun's store)"
                                         : " (MASTER_PORT + 1, beside torchrun's store)");
            if (rank() == 0)
                accept_from(listener, timeout);
            else
                connect_to(master_addr, master_port, timeout);
        } else {
#ifdef GPT_HAVE_MPI
            int mpi_rank = -1, mpi_world = -1;
            if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw Error(who + ": MPI could not start (MPI_Init failed)");
            mpi_initialized_ = true;
            MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
            MPI_Comm_size(MPI_COMM_WORLD, &mpi_world);
            if (mpi_rank != rank() || mpi_world != world())
                throw Error(who + ": MPI says rank " + std::to_string(mpi_rank) + " of " + std::to_string(mpi_world) +
                            ", the launcher's environment says otherwise");
            char address[300] = {};
            if (rank() == 0) std::snprintf(address, sizeof(address), "%s %d", host, port);
            MPI_Bcast(address, sizeof(address), MPI_CHAR, 0, MPI_COMM_WORLD);
            char h[256] = {};
            int p = 0;
            std::sscanf(address, "%255s %d", h, &p);
            how_ = "met over MPI at " + std::string(h) + ":" + std::to_string(p);
            if (rank() == 0)
                accept_from(listener, timeout);
            else
                connect_to(h, p, timeout);
#else
            throw Error(who + " (" + launch_.launcher + "): this build has no MPI (install libopenmpi-dev and "
                        "configure again), or set MASTER_ADDR and MASTER_PORT, or GPT_INIT_FILE");
#endif
        }
    } catch (...) {
        if (listener >= 0) ::close(listener);
        for (int s : sockets_)
            if (s >= 0) ::close(s);
        for (int s : control_)
            if (s >= 0) ::close(s);
        throw;
    }
    if (listener >= 0) ::close(listener);
}

Group::~Group() {
    for (int s : sockets_)
        if (s >= 0) ::close(s);
    for (int s : control_)
        if (s >= 0) ::close(s);
#ifdef GPT_HAVE_MPI
    if (mpi_initialized_) MPI_Finalize();
#endif
}

// Everyone is here: rank 0 sends every process the host names and the launchers' local ranks,
// from which each works out the same placement (or the same error).
void Group::place_on_hosts(const std::vector<std::string>& hosts, const std::vector<int>& launcher_local_ranks) {
    const Placement p = place_by_host(hosts, launcher_local_ranks, launch_.launcher);
    local_rank_ = p.local_rank[rank()];
    local_world_ = p.local_world[rank()];
    hosts_ = p.hosts;
    placement_disagreement_ = p.disagreement;
}

void Group::accept_from(int listener, double timeout_s) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> hosts(world());
    std::vector<int32_t> local_ranks(world(), -1);
    hosts[0] = launch_.host;
    local_ranks[0] = launch_.local_rank;
    int joined = 0;  // connections: two from each other process
    double next_note = 10;
    while (joined < 2 * (world() - 1)) {
        pollfd p{listener, POLLIN, 0};
        const int ready = ::poll(&p, 1, 1000);
        if (ready < 0 && errno != EINTR) throw Error(std::string("rank 0: poll failed: ") + std::strerror(errno));
        if (ready <= 0) {
            int arrived = 1;
            for (int r = 1; r < world(); ++r) arrived += sockets_[r] >= 0 && control_[r] >= 0;
            if (elapsed_s(start) > timeout_s)
                throw Error("rank 0: only " + std::to_string(arrived) + " of " + std::to_string(world()) +
                            " processes arrived within " + std::to_string(int(timeout_s)) + " s (GPT_INIT_TIMEOUT)");
            if (elapsed_s(start) > next_note) {
                std::fprintf(stderr, "rank 0: waiting for %d more process(es) (%d s)\n", world() - arrived,
                             int(next_note));
                next_note += 10;
            }
            continue;
        }
        const int s = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (s < 0 && (errno == EMFILE || errno == ENFILE))
            throw Error("rank 0: out of file descriptors for the connections of " + std::to_string(world()) +
                        " processes (ulimit -n is " + std::to_string(::sysconf(_SC_OPEN_MAX)) + ", " +
                        std::to_string(2 * world()) + " are needed)");
        if (s < 0) continue;
        const int on = 1;
        ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        // A caller that is not one of ours (a port scan, another program) may send nothing.
        timeval hello_timeout{5, 0}, no_timeout{0, 0};
        ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &hello_timeout, sizeof(hello_timeout));
        Hello hello;
        const ssize_t got = ::recv(s, &hello, sizeof(hello), MSG_WAITALL);
        ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &no_timeout, sizeof(no_timeout));
        if (got != ssize_t(sizeof(hello)) || hello.magic != Hello{}.magic ||
            (hello.channel != 0 && hello.channel != 1)) {
            ::close(s);  // not one of ours
            continue;
        }
        std::vector<int>& slots = hello.channel == 0 ? sockets_ : control_;
        if (hello.world != world() || hello.rank < 1 || hello.rank >= world() || slots[hello.rank] >= 0) {
            ::close(s);
            throw Error("rank 0: a process says it is rank " + std::to_string(hello.rank) + " of " +
                        std::to_string(hello.world) + ", this run has " + std::to_string(world()) +
                        " processes (two runs on one MASTER_PORT, or a rank given twice?)");
        }
        slots[hello.rank] = s;
        hello.host[kHostBytes - 1] = '\0';
        hosts[hello.rank] = hello.host;
        local_ranks[hello.rank] = hello.launcher_local_rank;
        ++joined;
    }
    // Everyone is here: tell them so, with where everyone runs.
    std::vector<char> table(world() * kHostBytes, '\0');
    for (int r = 0; r < world(); ++r) std::strncpy(&table[r * kHostBytes], hosts[r].c_str(), kHostBytes - 1);
    for (int r = 1; r < world(); ++r) {
        send(r, table.data(), table.size());
        send(r, local_ranks.data(), local_ranks.size() * sizeof(int32_t));
    }
    place_on_hosts(hosts, std::vector<int>(local_ranks.begin(), local_ranks.end()));
}

void Group::connect_to(const std::string& host, int port, double timeout_s) {
    const std::string who = "rank " + std::to_string(rank());
    const auto start = std::chrono::steady_clock::now();
    double next_note = 10;
    for (int* s : {&sockets_[0], &control_[0]})  // from an earlier try (GPT_INIT_FILE's stale address)
        if (*s >= 0) ::close(std::exchange(*s, -1));
    // The collectives' connection first, then the failures'; rank 0 is listening by the second.
    for (int channel = 0; channel < 2;) {
        addrinfo hints{}, *found = nullptr;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        const int err = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
        if (err != 0)
            throw Error(who + ": cannot resolve rank 0's host '" + host + "' (" + ::gai_strerror(err) + ")");
        int s = -1;
        for (addrinfo* a = found; a && s < 0; a = a->ai_next) {
            s = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (s >= 0 && ::connect(s, a->ai_addr, a->ai_addrlen) != 0) {
                ::close(s);
                s = -1;
            }
        }
        ::freeaddrinfo(found);
        if (s >= 0) {
            const int on = 1;
            ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
            (channel == 0 ? sockets_ : control_)[0] = s;
            Hello hello;
            hello.rank = rank();
            hello.world = world();
            hello.channel = channel;
            hello.launcher_local_rank = launch_.local_rank;
            std::strncpy(hello.host, launch_.host.c_str(), kHostBytes - 1);
            if (::send(s, &hello, sizeof(hello), MSG_NOSIGNAL) != sizeof(hello))
                throw Error(who + ": rank 0 at " + host + ":" + std::to_string(port) + " closed the connection");
            ++channel;
            continue;
        }
        if (elapsed_s(start) > timeout_s)
            throw Error(who + ": cannot reach rank 0 at " + host + ":" + std::to_string(port) + " within " +
                        std::to_string(int(timeout_s)) + " s (GPT_INIT_TIMEOUT)");
        if (elapsed_s(start) > next_note) {
            std::fprintf(stderr, "%s: waiting for rank 0 at %s:%d (%d s)\n", who.c_str(), host.c_str(), port,
                         int(next_note));
            next_note += 10;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // Rank 0 answers once everyone is here, with where everyone runs; within the time left (a
    // stale address in GPT_INIT_FILE may lead to another program, which never answers).
    const double left = std::max(1.0, timeout_s - elapsed_s(start));
    timeval answer_timeout{static_cast<time_t>(left), 0}, no_timeout{0, 0};
    ::setsockopt(sockets_[0], SOL_SOCKET, SO_RCVTIMEO, &answer_timeout, sizeof(answer_timeout));
    std::vector<char> table(world() * kHostBytes);
    std::vector<int32_t> local_ranks(world());
    try {
        receive(0, table.data(), table.size());
        receive(0, local_ranks.data(), local_ranks.size() * sizeof(int32_t));
    } catch (const PeerLost&) {
        if (elapsed_s(start) + 0.5 < timeout_s) throw;  // rank 0 closed the connection: it failed
        throw Error(who + ": rank 0 at " + host + ":" + std::to_string(port) + " did not say that everyone is " +
                    "here within " + std::to_string(int(timeout_s)) + " s (GPT_INIT_TIMEOUT)");
    }
    ::setsockopt(sockets_[0], SOL_SOCKET, SO_RCVTIMEO, &no_timeout, sizeof(no_timeout));
    std::vector<std::string> hosts(world());
    for (int r = 0; r < world(); ++r) {
        table[r * kHostBytes + kHostBytes - 1] = '\0';
        hosts[r] = &table[r * kHostBytes];
    }
    place_on_hosts(hosts, std::vector<int>(local_ranks.begin(), local_ranks.end()));
}

// Moves all `bytes` with `io` (send or recv), which may move fewer at a time; a peer that is
// gone (its process failed) is an error naming it.
template <class IO>
void Group::transfer(int peer, char* p, size_t bytes, IO io) {
    while (bytes > 0) {
        const ssize_t n = io(sockets_[peer], p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            throw PeerLost("rank " + std::to_string(rank()) + ": lost the connection to rank " + std::to_string(peer) +
                               " (did that process fail?)",
                           peer);
        p += n;
        bytes -= size_t(n);
    }
}

void Group::send(int peer, const void* data, size_t bytes) {
    // MSG_NOSIGNAL: a closed peer is an error to report, not a SIGPIPE that ends the process.
    transfer(peer, const_cast<char*>(static_cast<const char*>(data)), bytes,
             [](int s, char* p, size_t n) { return ::send(s, p, n, MSG_NOSIGNAL); });
}

void Group::receive(int peer, void* data, size_t bytes) {
    transfer(peer, static_cast<char*>(data), bytes, [](int s, char* p, size_t n) { return ::recv(s, p, n, 0); });
}

void Group::broadcast(void* data, size_t bytes) {
    if (world() == 1) return;
    if (rank() == 0)
        for (int r = 1; r < world(); ++r) send(r, data, bytes);
    else
        receive(0, data, bytes);
}

template <class T>
void Group::all_reduce(T* data, size_t n) {
    if (world() == 1) return;
    if (rank() == 0) {
        std::vector<T> part(n);
        for (int r = 1; r < world(); ++r) {
            receive(r, part.data(), n * sizeof(T));
            for (size_t i = 0; i < n; ++i) data[i] += part[i];
        }
    } else {
        send(0, data, n * sizeof(T));
    }
    broadcast(data, n * sizeof(T));
}

void Group::all_reduce_sum(float* data, size_t n) { all_reduce(data, n); }
void Group::all_reduce_sum(double* data, size_t n) { all_reduce(data, n); }

void Group::all_gather(void* data, size_t bytes_per_rank) {
    if (world() == 1) return;
    char* base = static_cast<char*>(data);
    if (rank() == 0)
        for (int r = 1; r < world(); ++r) receive(r, base + r * bytes_per_rank, bytes_per_rank);
    else
        send(0, base + rank() * bytes_per_rank, bytes_per_rank);
    broadcast(data, bytes_per_rank * world());
}

std::vector<uint64_t> Group::gather_values(uint64_t value) {
    std::vector<uint64_t> all(world());
    all[rank()] = value;
    all_gather(all.data(), sizeof(uint64_t));
    return all;
}

void Group::barrier() { gather_values(0); }

}  // namespace gpt::dist
