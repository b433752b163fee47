// The processes of a run and how they find each other (stage 06 and the CPU reference).
//
// A run of several processes is started by a launcher that tells each one its place in the
// environment: gpt_launch or torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
// Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH's mpiexec or srun --mpi=pmi2 (PMI_RANK, PMI_SIZE)
// or Slurm's srun (SLURM_PROCID, ...). The processes then meet at rank 0 over TCP: at
// MASTER_ADDR:MASTER_PORT (under torchrun, whose own store listens there, at MASTER_PORT + 1),
// at the address rank 0 writes into the file GPT_INIT_FILE (on a filesystem every node shares),
// or at the address rank 0 broadcasts over MPI (builds with MPI). The connections stay open for
// the whole run: the host-side collectives below go through them (the CPU reference's
// gradients, NCCL's unique id, consistency checks), and a second connection per process carries
// only the news that a process failed (dist/watchdog.h).
//
// Which processes share a machine (and so which GPU each takes) comes from the host names they
// send each other when they meet, not from any one launcher's variable: those differ between
// launchers, and some leave them unset (srun --mpi=pmi2 sets no local rank that MPI reads).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/error.h"

namespace gpt::dist {

// This process's place in the run, as its launcher described it.
struct Launch {
    int rank = 0, world = 1;
    int local_rank = -1;  // the launcher's local rank, -1 if it gives none: only a cross-check
    std::string launcher = "none";  // which environment said so, for messages: "torchrun", "srun (pmi2)", ...
    bool mpi = false;               // started by an MPI launcher: the processes can meet over MPI
    std::string host;               // this machine's name; empty: gethostname() (tests set their own)
};

// Reads the launcher's environment; one process (rank 0 of 1) when there is none. Throws
// gpt::Error for values that do not fit together (RANK 4 of WORLD_SIZE 4, ...).
Launch launch_from_environment();

// With several processes, asks CUDA to load every kernel of the program when it starts
// (CUDA_MODULE_LOADING=EAGER) instead of each on its first launch, unless the user set the
// variable; call it before the first CUDA call. Returns whether it set it. Why: NCCL's kernels
// wait on the GPU for the other processes (stage 06 sums a block's gradients on a second stream
// while backward goes on), and loading a kernel may have to wait for the kernels already running
// on the GPU (CUDA Programming Guide, "Lazy Loading", its potential hazards): a collective that
// waits for a process whose next kernel waits, to be loaded, for that process's own collective
// would wait forever. Loading costs once at the start what it would have cost at first launches.
bool load_kernels_eagerly_with_several_processes(const Launch& launch);

// A connection to another process ended while this one waited on it: that process failed (or
// was killed). The watchdog, when there is one, knows more (dist/watchdog.h).
struct PeerLost : Error {
    PeerLost(const std::string& message, int peer) : Error(message), peer(peer) {}
    int peer;
};

// The processes of a run, connected as a star around rank 0. Every collective is called by
// every process in the same order; rank 0 combines in rank order, so results are the same on
// every process and from run to run.
class Group {
  public:
    // Meets the other processes of `launch` (nothing to meet with one). Waits up to
    // GPT_INIT_TIMEOUT seconds (default 300) for them, printing on stderr while it waits.
    explicit Group(const Launch& launch);
    ~Group();
    Group(const Group&) = delete;
    Group& operator=(const Group&) = delete;

    int rank() const { return launch_.rank; }
    int world() const { return launch_.world; }
    // This process's place among those on its machine (same host name), in rank order.
    int local_rank() const { return local_rank_; }
    int local_world() const { return local_world_; }
    int hosts() const { return hosts_; }
    // Where a launcher's local rank disagrees with the host names, the line that says so (the
    // same on every process), else "". It matters where the local rank picks a GPU (stage 06);
    // CPU processes, which pick none, may run as two "machines" on one.
    const std::string& placement_disagreement() const { return placement_disagreement_; }
    const Launch& launch() const { return launch_; }
    std::string how() const { return how_; }  // how the processes met, for the banner

    // Rank 0's `bytes` bytes at `data` to every process.
    void broadcast(void* data, size_t bytes);
    // The element-wise sum over processes, added in rank order, on every process.
    void all_reduce_sum(float* data, size_t n);
    void all_reduce_sum(double* data, size_t n);
    // Rank r's part, bytes_per_rank bytes at data + r * bytes_per_rank, to every process.
    void all_gather(void* data, size_t bytes_per_rank);
    // One value from each process, in rank order.
    std::vector<uint64_t> gather_values(uint64_t value);
    void barrier();

    // The connections that carry failures only (dist/watchdog.h): rank 0 holds one to each
    // other rank (at [r]), the others one to rank 0 (at [0]); -1 where there is none.
    const std::vector<int>& control_sockets() const { return control_; }

  private:
    template <class T>
    void all_reduce(T* data, size_t n);
    template <class IO>
    void transfer(int peer, char* data, size_t bytes, IO io);
    void send(int peer, const void* data, size_t bytes);
    void receive(int peer, void* data, size_t bytes);
    void connect_to(const std::string& host, int port, double timeout_s);
    void accept_from(int listener, double timeout_s);
    void place_on_hosts(const std::vector<std::string>& hosts, const std::vector<int>& launcher_local_ranks);

    Launch launch_;
    std::string how_ = "one process";
    int local_rank_ = 0, local_world_ = 1, hosts_ = 1;
    std::string placement_disagreement_;
    std::vector<int> sockets_;  // rank 0: the socket of rank r at [r]; others: rank 0's at [0]
    std::vector<int> control_;  // the same, for the failure connections
    bool mpi_initialized_ = false;
};

// Where each process sits, from the host name each one sent: its local rank (its place among the
// processes of its host, in rank order), how many share its host, and how many hosts there are.
// `launcher_local_ranks` (-1: not given) should agree; the first that does not is described in
// `disagreement`. Separate from Group so that it is tested on made-up hosts.
struct Placement {
    std::vector<int> local_rank, local_world;
    int hosts = 0;
    std::string disagreement;
};
Placement place_by_host(const std::vector<std::string>& hosts, const std::vector<int>& launcher_local_ranks,
                        const std::string& launcher);

}  // namespace gpt::dist
