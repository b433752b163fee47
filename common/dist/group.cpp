#include "dist/group.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "util/error.h"

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

// What every connection starts with: who is calling, and the run it thinks it belongs to.
struct Hello {
    uint32_t magic = 0x47505444;  // "GPTD"
    int32_t rank = 0, world = 0;
};

}  // namespace

Launch launch_from_environment() {
    Launch l;
    if (env("WORLD_SIZE") || env("RANK")) {
        l.launcher = "RANK/WORLD_SIZE";
        l.world = env_int("WORLD_SIZE", 1);
        l.rank = env_int("RANK", 0);
        l.local_rank = env_int("LOCAL_RANK", l.rank);
    } else if (env("OMPI_COMM_WORLD_SIZE")) {
        l.launcher = "mpirun";
        l.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
        l.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
        l.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    } else if (env("PMI_SIZE") && env("PMI_RANK")) {
        l.launcher = "mpirun";
        l.world = env_int("PMI_SIZE", 1);
        l.rank = env_int("PMI_RANK", 0);
        l.local_rank = env_int("MPI_LOCALRANKID", 0);
    } else if (env("SLURM_PROCID") && (env("SLURM_STEP_NUM_TASKS") || env("SLURM_NTASKS"))) {
        // A job step (srun) knows its own size; SLURM_NTASKS is the whole allocation's.
        l.launcher = "srun";
        l.world = env_int(env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 1);
        l.rank = env_int("SLURM_PROCID", 0);
        l.local_rank = env_int("SLURM_LOCALID", 0);
    }
    if (l.world < 1 || l.rank >= l.world)
        throw Error("launcher environment (" + l.launcher + "): rank " + std::to_string(l.rank) +
                    " is not one of the " + std::to_string(l.world) + " processes of the run");
    return l;
}

Group::Group(const Launch& launch) : launch_(launch) {
    if (launch_.world == 1) return;
    sockets_.assign(launch_.world, -1);
    const double timeout = env_int("GPT_INIT_TIMEOUT", 300);
    const std::string who = "rank " + std::to_string(rank()) + " of " + std::to_string(world());

    // Rank 0 listens: on MASTER_PORT, or on a port the system picks when it tells the others
    // the address itself (file, MPI).
    const char* master_addr = env("MASTER_ADDR");
    const char* init_file = env("GPT_INIT_FILE");
    const bool mpi = !init_file && !master_addr && launch_.launcher == "mpirun";
    int listener = -1, port = 0;
    if (rank() == 0) {
        if (!init_file && !mpi) port = env_int("MASTER_PORT", -1);
        listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int on = 1;
        ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        addr.sin_port = htons(static_cast<uint16_t>(port < 0 ? 0 : port));
        if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
            ::listen(listener, world()) != 0) {
            const std::string why = std::strerror(errno);
            if (listener >= 0) ::close(listener);
            // torchrun's own store may be listening on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE).
            throw Error(who + ": cannot listen on port " + std::to_string(port) + " (" + why + ")" +
                        (port <= 0 ? ""
                         : env("TORCHELASTIC_RUN_ID") ? "; under torchrun, set GPT_INIT_FILE to a path all nodes see"
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
            if (!master_addr || !env("MASTER_PORT"))
                throw Error(who + " (" + launch_.launcher + "): the processes cannot meet: set MASTER_ADDR and "
                            "MASTER_PORT (rank 0's host and a free port), or GPT_INIT_FILE (a path all nodes see)");
            how_ = "met at " + std::string(master_addr) + ":" + env("MASTER_PORT");
            if (rank() == 0)
                accept_from(listener, timeout);
            else
                connect_to(master_addr, env_int("MASTER_PORT", 0), timeout);
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
            throw Error(who + " (mpirun): this build has no MPI (install libopenmpi-dev and configure again), or "
                        "set MASTER_ADDR and MASTER_PORT, or GPT_INIT_FILE");
#endif
        }
    } catch (...) {
        if (listener >= 0) ::close(listener);
        for (int s : sockets_)
            if (s >= 0) ::close(s);
        throw;
    }
    if (listener >= 0) ::close(listener);
}

Group::~Group() {
    for (int s : sockets_)
        if (s >= 0) ::close(s);
    if (rank() == 0 && world() > 1)
        if (const char* f = env("GPT_INIT_FILE")) std::remove(f);  // the next run must not find this address
#ifdef GPT_HAVE_MPI
    if (mpi_initialized_) MPI_Finalize();
#endif
}

void Group::accept_from(int listener, double timeout_s) {
    const auto start = std::chrono::steady_clock::now();
    int joined = 1;
    double next_note = 10;
    while (joined < world()) {
        pollfd p{listener, POLLIN, 0};
        const int ready = ::poll(&p, 1, 1000);
        if (ready < 0 && errno != EINTR) throw Error(std::string("rank 0: poll failed: ") + std::strerror(errno));
        if (ready <= 0) {
            if (elapsed_s(start) > timeout_s)
                throw Error("rank 0: only " + std::to_string(joined) + " of " + std::to_string(world()) +
                            " processes arrived within " + std::to_string(int(timeout_s)) + " s (GPT_INIT_TIMEOUT)");
            if (elapsed_s(start) > next_note) {
                std::fprintf(stderr, "rank 0: waiting for %d more process(es) (%d s)\n", world() - joined,
                             int(next_note));
                next_note += 10;
            }
            continue;
        }
        const int s = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (s < 0) continue;
        const int on = 1;
        ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
        Hello hello;
        if (::recv(s, &hello, sizeof(hello), MSG_WAITALL) != sizeof(hello) || hello.magic != Hello{}.magic) {
            ::close(s);  // not one of ours
            continue;
        }
        if (hello.world != world() || hello.rank < 1 || hello.rank >= world() || sockets_[hello.rank] >= 0) {
            ::close(s);
            throw Error("rank 0: a process says it is rank " + std::to_string(hello.rank) + " of " +
                        std::to_string(hello.world) + ", this run has " + std::to_string(world()) +
                        " processes (two runs on one MASTER_PORT, or a rank given twice?)");
        }
        sockets_[hello.rank] = s;
        ++joined;
    }
    // Everyone is here: tell them so.
    for (int r = 1; r < world(); ++r) send(r, &launch_.world, sizeof(int));
}

void Group::connect_to(const std::string& host, int port, double timeout_s) {
    const std::string who = "rank " + std::to_string(rank());
    const auto start = std::chrono::steady_clock::now();
    double next_note = 10;
    for (;;) {
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
            sockets_[0] = s;
            Hello hello;
            hello.rank = rank();
            hello.world = world();
            send(0, &hello, sizeof(hello));
            int everyone = 0;
            receive(0, &everyone, sizeof(everyone));
            return;
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
}

// Moves all `bytes` with `io` (send or recv), which may move fewer at a time; a peer that is
// gone (its process failed) is an error naming it.
template <class IO>
void Group::transfer(int peer, char* p, size_t bytes, IO io) {
    while (bytes > 0) {
        const ssize_t n = io(sockets_[peer], p, bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            throw Error("rank " + std::to_string(rank()) + ": lost the connection to rank " + std::to_string(peer) +
                        " (did that process fail?)");
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
