// The processes of a run and how they find each other (stage 06 and the CPU reference).
//
// A run of several processes is started by a launcher that tells each one its place in the
// environment: gpt_launch or torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
// mpirun (OMPI_COMM_WORLD_*) or Slurm's srun (SLURM_PROCID, ...). The processes then meet at
// rank 0 over TCP: at MASTER_ADDR:MASTER_PORT, at the address rank 0 writes into the file
// GPT_INIT_FILE (on a filesystem every node shares), or at the address rank 0 broadcasts over
// MPI (builds with MPI). The connections stay open for the whole run: the host-side collectives
// below go through them (the CPU reference's gradients, NCCL's unique id, consistency checks).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpt::dist {

// This process's place in the run, as its launcher described it.
struct Launch {
    int rank = 0, world = 1, local_rank = 0;
    std::string launcher = "none";  // which environment said so: "RANK/WORLD_SIZE", "mpirun", "srun", "none"
};

// Reads the launcher's environment; one process (rank 0 of 1) when there is none. Throws
// gpt::Error for values that do not fit together (RANK 4 of WORLD_SIZE 4, ...).
Launch launch_from_environment();

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
    int local_rank() const { return launch_.local_rank; }
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

  private:
    template <class T>
    void all_reduce(T* data, size_t n);
    template <class IO>
    void transfer(int peer, char* data, size_t bytes, IO io);
    void send(int peer, const void* data, size_t bytes);
    void receive(int peer, void* data, size_t bytes);
    void connect_to(const std::string& host, int port, double timeout_s);
    void accept_from(int listener, double timeout_s);

    Launch launch_;
    std::string how_ = "one process";
    std::vector<int> sockets_;  // rank 0: the socket of rank r at [r]; others: rank 0's at [0]
    bool mpi_initialized_ = false;
};

}  // namespace gpt::dist
