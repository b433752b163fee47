// Several processes training together, on the CPU: the bookkeeping stage 06 does over NCCL
// (disjoint windows, gradients summed per block, ZeRO-1 shards, the norm over shards, gradient
// accumulation, checkpoints that move between numbers of processes) done by the CPU reference
// over real TCP connections (common/dist). The ranks run as threads of this test, each with its
// own model and its own connection to rank 0, exactly as separate processes would.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cpu/reference_stage.h"
#include "dist/group.h"
#include "dist/host_parallel.h"
#include "dist/watchdog.h"
#include "model/config.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/tolerance.h"
#include "train/gpt.h"
#include "train/loop.h"
#include "train/parallel.h"
#include "util/error.h"
#include "util/file.h"
#include "util/rng.h"

namespace {

using gpt::CpuReference;
using gpt::GPT;

// A port nobody listens on now (the system picks it).
int free_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(s);
    return ntohs(a.sin_port);
}

// Runs body(rank) on `world` threads that meet at a fresh loopback port; rethrows the first
// exception of any of them.
void run_ranks(int world, const std::function<void(int)>& body) {
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(world);
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (...) {
                errors[r] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    ::unsetenv("MASTER_ADDR");
    ::unsetenv("MASTER_PORT");
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

gpt::dist::Launch launch(int rank, int world) {
    gpt::dist::Launch l;
    l.rank = rank;
    l.world = world;
    l.local_rank = rank;
    l.launcher = "RANK/WORLD_SIZE";
    return l;
}

// --- shards and buckets ----------------------------------------------------------------------

TEST(Parallel, ShardsCoverTheArrayOnce) {
    for (size_t total : {size_t(1), size_t(2), size_t(7), size_t(1000), size_t(1001), size_t(124475904)})
        for (int world : {1, 2, 3, 4, 7, 8}) {
            size_t next = 0;
            for (int r = 0; r < world; ++r) {
                const gpt::Shard s = gpt::shard_of(total, r, world);
                EXPECT_EQ(s.begin, next) << total << " over " << world << ", rank " << r;
                EXPECT_LE(s.count, s.stride);
                EXPECT_EQ(s.padded, s.stride * world);
                EXPECT_GE(s.padded, total);
                EXPECT_LT(s.padded - total, size_t(world));  // no more padding than needed
                next = s.end();
            }
            EXPECT_EQ(next, total) << total << " over " << world;
        }
}

TEST(Parallel, BucketsCoverTheLayoutOnceInTheOrderBackwardFinishes) {
    for (const char* name : {"micro", "d12"}) {
        const gpt::GPTConfig config = gpt::config_by_name(name);
        const gpt::ParamLayout layout(config, config.padded_vocab(128));
        const std::vector<gpt::Bucket> buckets = gpt::gradient_buckets(layout, config.n_layer);
        ASSERT_EQ(buckets.size(), size_t(config.n_layer + 1));
        std::vector<std::pair<size_t, size_t>> pieces;
        for (const auto& b : buckets) pieces.insert(pieces.end(), b.pieces.begin(), b.pieces.end());
        std::sort(pieces.begin(), pieces.end());
        size_t next = 0;
        for (const auto& [offset, count] : pieces) {
            EXPECT_EQ(offset, next) << name;
            next = offset + count;
        }
        EXPECT_EQ(next, layout.total()) << name;
        // The first bucket is the last block's: its qkv weight slice is the last of that tensor.
        const size_t qkv_slice = layout.size[gpt::kQkvW] / config.n_layer;
        bool found = false;
        for (const auto& [offset, count] : buckets[0].pieces)
            found |= offset == layout.offset[gpt::kQkvW] + qkv_slice * (config.n_layer - 1) && count == qkv_slice;
        EXPECT_TRUE(found) << name;
    }
}

// --- the launcher's environment and the TCP group --------------------------------------------

struct Env {
    explicit Env(std::vector<std::pair<const char*, const char*>> vars) : vars_(std::move(vars)) {
        for (auto& [k, v] : vars_) ::setenv(k, v, 1);
    }
    Env(const char* name, const char* value) : Env(std::vector<std::pair<const char*, const char*>>{{name, value}}) {}
    ~Env() {
        for (auto& [k, v] : vars_) ::unsetenv(k);
    }
    std::vector<std::pair<const char*, const char*>> vars_;
};

// What each launcher puts in a process's environment, variable for variable (the values of one
// process of a run of 16 on 2 machines of 8, or as noted), and what the trainer must read from
// it. Only a launcher's own local-rank variable is trusted, and only as a cross-check.
struct LauncherCase {
    const char* name;
    std::vector<std::pair<const char*, const char*>> env;
    int rank, world, local_rank;
    const char* launcher;
    bool mpi;
};

const std::vector<std::pair<const char*, const char*>> kSlurmStep = {
    // srun -N 2 --ntasks-per-node 8, the 10th task (node 1, local 1), in an allocation of 64 tasks
    {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"},
    {"SLURM_NODEID", "1"}, {"SLURM_NTASKS", "64"}, {"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_NNODES", "2"},
    {"SLURM_STEP_NODELIST", "gpu[01-02]"}, {"SLURM_STEP_TASKS_PER_NODE", "8(x2)"}, {"SLURM_JOB_NODELIST", "gpu[01-08]"},
};
// The batch step of an sbatch script: an MPI launcher started from it inherits these.
const std::vector<std::pair<const char*, const char*>> kSbatchScript = {
    {"SLURM_JOB_ID", "4242"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "0"},
    {"SLURM_NTASKS", "16"}, {"SLURM_NNODES", "2"}, {"SLURM_JOB_NODELIST", "gpu[01-02]"},
};
std::vector<std::pair<const char*, const char*>> with(std::vector<std::pair<const char*, const char*>> a,
                                                      const std::vector<std::pair<const char*, const char*>>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

const std::vector<LauncherCase>& launcher_cases() {
    static const std::vector<LauncherCase> cases = {
        {"nothing", {}, 0, 1, -1, "none", false},
        {"torchrun --nnodes 2 --nproc-per-node 8, node 1",
         {{"LOCAL_RANK", "3"}, {"RANK", "11"}, {"GROUP_RANK", "1"}, {"ROLE_RANK", "11"}, {"ROLE_NAME", "default"},
          {"LOCAL_WORLD_SIZE", "8"}, {"WORLD_SIZE", "16"}, {"GROUP_WORLD_SIZE", "2"}, {"ROLE_WORLD_SIZE", "16"},
          {"MASTER_ADDR", "gpu01"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
          {"TORCHELASTIC_ERROR_FILE", "/tmp/torchelastic_x1/none_y2/attempt_0/3/error.json"}, {"OMP_NUM_THREADS", "1"}},
         11, 16, 3, "torchrun", false},
        {"gpt_launch --nproc 8",
         {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "5"}, {"LOCAL_WORLD_SIZE", "8"},
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "41234"}},
         5, 8, 5, "RANK/WORLD_SIZE", false},
        {"RANK and WORLD_SIZE by hand, no LOCAL_RANK",
         {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}},
         1, 2, -1, "RANK/WORLD_SIZE", false},
        {"Open MPI mpirun -np 16 -H a:8,b:8",
         {{"OMPI_COMM_WORLD_RANK", "13"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "5"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}, {"OMPI_COMM_WORLD_NODE_RANK", "5"}, {"OMPI_UNIVERSE_SIZE", "16"},
          {"OMPI_MCA_orte_ess_num_procs", "16"}, {"PMIX_RANK", "13"}, {"PMIX_NAMESPACE", "prterun-a-1234@1"},
          {"PMIX_SERVER_URI41", "pmix-server.1234;tcp4://127.0.0.1:40000"}},
         13, 16, 5, "mpirun (Open MPI)", true},
        {"Open MPI mpirun inside an sbatch script",
         with(kSbatchScript, {{"OMPI_COMM_WORLD_RANK", "13"}, {"OMPI_COMM_WORLD_SIZE", "16"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"},
                              {"PMIX_RANK", "13"}}),
         13, 16, 5, "mpirun (Open MPI)", true},
        {"MPICH (Hydra) mpiexec -n 8 -ppn 4",
         {{"PMI_RANK", "6"}, {"PMI_SIZE", "8"}, {"PMI_FD", "6"}, {"PMI_SUBVERSION", "1"}, {"PMI_VERSION", "1"},
          {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "4"}, {"MPIR_CVAR_CH3_INTERFACE_HOSTNAME", "b"}},
         6, 8, 2, "mpiexec (PMI)", true},
        {"MPICH mpiexec inside an sbatch job (Hydra's proxies started by srun, one per node)",
         with({{"SLURM_JOB_ID", "4242"}, {"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"},
               {"SLURM_NTASKS", "16"}},
              {{"PMI_RANK", "6"}, {"PMI_SIZE", "8"}, {"PMI_FD", "6"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "4"}}),
         6, 8, 2, "mpiexec (PMI)", true},
        {"MPICH mpiexec inside an sbatch script, rank 0 (its SLURM_PROCID=0 is the script's)",
         with(kSbatchScript, {{"PMI_RANK", "0"}, {"PMI_SIZE", "16"}, {"PMI_FD", "6"}, {"MPI_LOCALRANKID", "0"},
                              {"MPI_LOCALNRANKS", "8"}}),
         0, 16, 0, "mpiexec (PMI)", true},
        {"the trainer started by an sbatch script itself, without srun", kSbatchScript, 0, 1, -1, "none", false},
        {"srun (no MPI plugin)", kSlurmStep, 9, 16, 1, "srun", false},
        {"srun --mpi=pmi2",
         with(kSlurmStep, {{"PMI_FD", "7"}, {"PMI_JOBID", "4242.0"}, {"PMI_RANK", "9"}, {"PMI_SIZE", "16"},
                           {"PMI_SPAWNED", "0"}}),
         9, 16, 1, "srun (pmi2)", false},
        {"srun --mpi=pmix",
         with(kSlurmStep, {{"PMIX_RANK", "9"}, {"PMIX_NAMESPACE", "slurm.pmix.4242.0"},
                           {"PMIX_SERVER_URI41", "pmix-server.1;tcp4://10.0.0.2:41000"}, {"PMIX_VERSION", "4.2.9"}}),
         9, 16, 1, "srun (pmix)", false},
    };
    return cases;
}

TEST(Launch, ReadsEachLauncher) {
    // Every variable any case sets is unset in the others.
    std::vector<const char*> every;
    for (const auto& c : launcher_cases())
        for (const auto& [k, v] : c.env) every.push_back(k);
    for (const auto& c : launcher_cases()) {
        std::vector<std::pair<std::string, std::string>> saved;
        for (const char* k : every)
            if (const char* v = std::getenv(k)) saved.emplace_back(k, v);
        for (const char* k : every) ::unsetenv(k);
        Env e(c.env);
        const gpt::dist::Launch l = gpt::dist::launch_from_environment();
        EXPECT_EQ(l.rank, c.rank) << c.name;
        EXPECT_EQ(l.world, c.world) << c.name;
        EXPECT_EQ(l.local_rank, c.local_rank) << c.name;
        EXPECT_EQ(l.launcher, c.launcher) << c.name;
        EXPECT_EQ(l.mpi, c.mpi) << c.name;
        for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
    }
}

// The local rank comes from the host names the processes send each other; the launcher's own
// variable only has to agree.
TEST(Launch, LocalRanksComeFromTheHostNames) {
    const std::vector<std::string> hosts = {"gpu01", "gpu02", "gpu01", "gpu02", "gpu03", "gpu01"};
    const gpt::dist::Placement p = gpt::dist::place_by_host(hosts, std::vector<int>(6, -1), "RANK/WORLD_SIZE");
    EXPECT_EQ(p.local_rank, (std::vector<int>{0, 0, 1, 1, 0, 2}));
    EXPECT_EQ(p.local_world, (std::vector<int>{3, 2, 3, 2, 1, 3}));
    EXPECT_EQ(p.hosts, 3);
    // A launcher that agrees changes nothing.
    EXPECT_EQ(gpt::dist::place_by_host(hosts, {0, 0, 1, 1, 0, 2}, "torchrun").local_rank, p.local_rank);

    // srun --mpi=pmi2 under the old reading: every process local rank 0 (MPI_LOCALRANKID unset).
    // The host names put 8 processes of one machine on GPUs 0 to 7 whatever the launcher says.
    const gpt::dist::Placement one_node =
        gpt::dist::place_by_host(std::vector<std::string>(8, "gpu01"), std::vector<int>(8, -1), "srun (pmi2)");
    for (int r = 0; r < 8; ++r) EXPECT_EQ(one_node.local_rank[r], r);

    EXPECT_EQ(p.disagreement, "");

    // A launcher that disagrees: one line naming both local ranks, the rank and the host (stage 06
    // stops with it; the CPU reference, which picks no GPU, goes on).
    EXPECT_EQ(gpt::dist::place_by_host({"n", "n", "n", "n"}, {0, 1, 0, 1}, "torchrun").disagreement,
              "rank 2 is local rank 0 by its launcher (torchrun) but local rank 2 of the 4 processes on host 'n' by "
              "the host names: two machines with one name, one machine under several names (containers?), or a "
              "launcher variable left over from another job?");
}

// Several processes load every kernel at the start (CUDA_MODULE_LOADING=EAGER), so that no
// kernel's first launch waits for another process's collective (dist/group.h); one process keeps
// CUDA's default, and a value the user set stays.
TEST(Launch, SeveralProcessesLoadKernelsEagerly) {
    const char* before = std::getenv("CUDA_MODULE_LOADING");
    const std::string saved = before ? before : "";
    ::unsetenv("CUDA_MODULE_LOADING");
    EXPECT_FALSE(gpt::dist::load_kernels_eagerly_with_several_processes(launch(0, 1)));
    EXPECT_EQ(std::getenv("CUDA_MODULE_LOADING"), nullptr);
    EXPECT_TRUE(gpt::dist::load_kernels_eagerly_with_several_processes(launch(1, 2)));
    ASSERT_NE(std::getenv("CUDA_MODULE_LOADING"), nullptr);
    EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "EAGER");
    {
        Env user("CUDA_MODULE_LOADING", "LAZY");
        EXPECT_FALSE(gpt::dist::load_kernels_eagerly_with_several_processes(launch(1, 2)));
        EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "LAZY");
    }
    if (before) ::setenv("CUDA_MODULE_LOADING", saved.c_str(), 1);
}

TEST(Launch, RefusesWhatDoesNotFit) {
    {
        Env e({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
        EXPECT_THROW(gpt::dist::launch_from_environment(), gpt::Error);
    }
    {
        Env e({{"RANK", "one"}, {"WORLD_SIZE", "4"}});
        EXPECT_THROW(gpt::dist::launch_from_environment(), gpt::Error);
    }
    // Several processes with no way to meet: one line saying what to set.
    try {
        gpt::dist::Group g(launch(1, 2));
        FAIL() << "expected an error";
    } catch (const gpt::Error& e) {
        EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    }
}

TEST(Group, GivesUpOnAnAbsentRankZeroWithOneLine) {
    Env e({{"MASTER_ADDR", "127.0.0.1"}, {"GPT_INIT_TIMEOUT", "1"}});
    const std::string port = std::to_string(free_port());
    Env p(std::vector<std::pair<const char*, const char*>>{{"MASTER_PORT", port.c_str()}});
    try {
        gpt::dist::Group g(launch(1, 2));
        FAIL() << "expected an error";
    } catch (const gpt::Error& err) {
        EXPECT_NE(std::string(err.what()).find("cannot reach rank 0 at 127.0.0.1:" + port), std::string::npos)
            << err.what();
    }
}

TEST(Group, CollectivesOverLoopback) {
    const int world = 3;
    const size_t n = 1001;
    std::vector<std::vector<float>> inputs(world);
    gpt::Rng rng(7);
    for (auto& v : inputs)
        for (size_t i = 0; i < n; ++i) v.push_back(rng.normal() * (1.0f + i % 13));
    std::vector<float> expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = (inputs[0][i] + inputs[1][i]) + inputs[2][i];  // rank order

    run_ranks(world, [&](int r) {
        gpt::dist::Group g(launch(r, world));
        std::vector<float> sum = inputs[r];
        g.all_reduce_sum(sum.data(), n);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(sum[i], expected[i]) << "rank " << r << ", element " << i;

        std::vector<double> gathered(3 * 5, -1.0);
        for (int i = 0; i < 5; ++i) gathered[r * 5 + i] = 100.0 * r + i;
        g.all_gather(gathered.data(), 5 * sizeof(double));
        for (int q = 0; q < world; ++q)
            for (int i = 0; i < 5; ++i) EXPECT_EQ(gathered[q * 5 + i], 100.0 * q + i);

        int value = r == 0 ? 42 : -1;
        g.broadcast(&value, sizeof(value));
        EXPECT_EQ(value, 42);
        EXPECT_EQ(g.gather_values(uint64_t(10 + r)), (std::vector<uint64_t>{10, 11, 12}));
    });
}

TEST(Group, MeetsThroughAFile) {
    const std::string file = ::testing::TempDir() + "gpt_init_" + std::to_string(::getpid());
    Env e({{"GPT_INIT_FILE", file.c_str()}, {"GPT_INIT_ADDR", "127.0.0.1"}});
    std::vector<std::thread> threads;
    std::vector<std::string> errors(3);
    for (int r = 0; r < 3; ++r)
        threads.emplace_back([&, r] {
            try {
                gpt::dist::Group g(launch(r, 3));
                EXPECT_EQ(g.gather_values(uint64_t(r)), (std::vector<uint64_t>{0, 1, 2}));
                g.barrier();
            } catch (const std::exception& ex) {
                errors[r] = ex.what();
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& err : errors) EXPECT_EQ(err, "");
    EXPECT_NE(::access(file.c_str(), F_OK), 0) << "rank 0 leaves no address behind for the next run";
}

// Processes on made-up machines: each learns its place on its own from the names they exchanged.
TEST(Group, PlacesEachProcessByItsHostName) {
    const std::vector<std::string> hosts = {"node-a", "node-b", "node-a", "node-b", "node-c"};
    const int world = int(hosts.size());
    std::vector<int> local_rank(world), local_world(world), host_count(world);
    run_ranks(world, [&](int r) {
        gpt::dist::Launch l = launch(r, world);
        l.local_rank = -1;  // a launcher that gives none (srun --mpi=pmi2 for MPI's reading)
        l.host = hosts[r];
        gpt::dist::Group g(l);
        local_rank[r] = g.local_rank();
        local_world[r] = g.local_world();
        host_count[r] = g.hosts();
    });
    EXPECT_EQ(local_rank, (std::vector<int>{0, 0, 1, 1, 0}));
    EXPECT_EQ(local_world, (std::vector<int>{2, 2, 2, 2, 1}));
    EXPECT_EQ(host_count, std::vector<int>(world, 3));
}

// A launcher whose local rank disagrees with the host names: every process learns the same line,
// with which stage 06 stops before NCCL would see two processes on one GPU.
TEST(Group, EveryProcessLearnsOfADisagreeingLauncher) {
    const int world = 4;
    std::vector<std::string> seen(world);
    run_ranks(world, [&](int r) {
        gpt::dist::Launch l = launch(r, world);
        l.host = r < 2 ? "node-a" : "node-b";
        l.local_rank = r == 3 ? 0 : r % 2;  // rank 3 is the second process on node-b
        l.launcher = "srun";
        gpt::dist::Group g(l);
        seen[r] = g.placement_disagreement();
    });
    for (int r = 0; r < world; ++r)
        EXPECT_EQ(seen[r], "rank 3 is local rank 0 by its launcher (srun) but local rank 1 of the 2 processes on "
                           "host 'node-b' by the host names: two machines with one name, one machine under several "
                           "names (containers?), or a launcher variable left over from another job?")
            << "rank " << r;
}

// torchrun's own store listens on MASTER_PORT: the processes meet beside it, at the next port,
// with nothing more set than torchrun sets.
TEST(Group, MeetsBesideTorchrunsStore) {
    // torchrun's store, for this test: a listener on MASTER_PORT that never answers.
    const int store = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(a);
    ASSERT_EQ(::bind(store, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(::listen(store, 8), 0);
    ::getsockname(store, reinterpret_cast<sockaddr*>(&a), &len);
    const std::string port = std::to_string(ntohs(a.sin_port));
    Env e({{"MASTER_ADDR", "127.0.0.1"}, {"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"GPT_INIT_TIMEOUT", "20"}});
    Env p(std::vector<std::pair<const char*, const char*>>{{"MASTER_PORT", port.c_str()}});
    const int world = 3;
    std::vector<std::string> how(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
            try {
                gpt::dist::Launch l = launch(r, world);
                l.launcher = "torchrun";
                gpt::dist::Group g(l);
                EXPECT_EQ(g.gather_values(uint64_t(r)), (std::vector<uint64_t>{0, 1, 2}));
                how[r] = g.how();
            } catch (const std::exception& ex) {
                how[r] = std::string("error: ") + ex.what();
            }
        });
    for (auto& t : threads) t.join();
    ::close(store);
    const std::string next = std::to_string(ntohs(a.sin_port) + 1);
    for (int r = 0; r < world; ++r)
        EXPECT_EQ(how[r], "met at 127.0.0.1:" + next + " (MASTER_PORT + 1, beside torchrun's store)") << "rank " << r;
}

// --- the watchdog's own ends, each in a child process (gtest's death tests) -------------------
// (The processes of tests/cpu/failure_test.sh cover the failure connections between processes;
// these, what only a device would show: an abort that hangs, the device's error, the time limit.)

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
[[noreturn]] void wait_forever() {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// NCCL's abort can wait for CUDA Graphs that hold its operations: the process ends all the same.
TEST(WatchdogDeathTest, AnAbortThatHangsDoesNotKeepTheProcess) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EXIT(
        {
            gpt::dist::Group group(launch(0, 1));
            gpt::dist::Watchdog watchdog(group, 0, {nullptr, [] { wait_forever(); }});
            watchdog.fail("step 3 failed on purpose", false);
        },
        ::testing::ExitedWithCode(1), "error: rank 0 of 1: step 3 failed on purpose");
    EXPECT_LT(seconds_since(t0), 8.0) << "the abort is given 3 s";
}

// NCCL's asynchronous error ends the process, after the moment it leaves for a peer's news.
TEST(WatchdogDeathTest, TheDevicesErrorEndsTheProcess) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            gpt::dist::Group group(launch(0, 1));
            gpt::dist::Watchdog watchdog(group, 0,
                                         {[] { return std::string("NCCL: unhandled system error (a test)"); }, [] {}});
            wait_forever();
        },
        ::testing::ExitedWithCode(1), "error: rank 0 of 1: NCCL: unhandled system error \\(a test\\)");
}

// A step past the time limit ends the process, and a checkpoint being written leaves no PATH.tmp.
TEST(WatchdogDeathTest, AStepPastTheLimitEndsTheProcessWithoutLeftovers) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    const std::string path = ::testing::TempDir() + "watchdog_" + std::to_string(::getpid()) + ".ckpt";
    EXPECT_EXIT(
        {
            gpt::dist::Group group(launch(0, 1));
            gpt::dist::Watchdog watchdog(group, 0.3, {});
            watchdog.start("step 7");
            gpt::InterruptibleFile file(path, "checkpoint");
            file.write("half of a checkpoint", 20);
            wait_forever();
        },
        ::testing::ExitedWithCode(1), "error: rank 0 of 1: step 7 has not finished within 0.3 s \\(--step-timeout 0.3\\)");
    EXPECT_NE(::access((path + ".tmp").c_str(), F_OK), 0) << "PATH.tmp left behind";
    EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

// Rank 0 writing the last checkpoint after the others ended cleanly keeps no one waiting: its
// time limit no longer applies (ranks as threads of the child process).
TEST(WatchdogDeathTest, NoTimeLimitOnceEveryOtherProcessHasEnded) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            run_ranks(2, [](int r) {
                gpt::dist::Group group(launch(r, 2));
                gpt::dist::Watchdog watchdog(group, 0.3, {});
                if (r == 0) {  // rank 1 ends at once
                    watchdog.start("the last checkpoint");
                    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                }
            });
            std::exit(0);
        },
        ::testing::ExitedWithCode(0), "");
}

// The fault switch of the failure tests: digits only, and a rank the run has.
TEST(FaultSwitch, ReadsRankStepAndHang) {
    {
        Env e("GPT_TEST_FAIL", "1:3");
        const gpt::InjectedFault f = gpt::injected_fault(3);
        EXPECT_EQ(f.rank, 1);
        EXPECT_EQ(f.step, 3);
        EXPECT_FALSE(f.hang);
    }
    {
        Env e("GPT_TEST_FAIL", "0:12:hang");
        const gpt::InjectedFault f = gpt::injected_fault(1);
        EXPECT_EQ(f.rank, 0);
        EXPECT_EQ(f.step, 12);
        EXPECT_TRUE(f.hang);
    }
    EXPECT_EQ(gpt::injected_fault(2).rank, -1);  // unset: no fault
    for (const char* bad : {"1", "1:", "1:3:", "1:3:hangx", "1:3 ", " 1:3", "1: 3", "+1:3", "1:0", "-1:3",
                            "99999999999:3", "1:3:hang:4", "a:b"}) {
        Env e("GPT_TEST_FAIL", bad);
        EXPECT_THROW(gpt::injected_fault(4), gpt::Error) << bad;
    }
    Env e("GPT_TEST_FAIL", "4:1");
    try {
        gpt::injected_fault(4);
        FAIL() << "rank 4 of 4 accepted";
    } catch (const gpt::Error& err) {
        EXPECT_STREQ(err.what(), "GPT_TEST_FAIL=4:1: there is no rank 4 among the 4 process(es) of this run");
    }
}

// --- training: N processes of batch B are one process of batch N x B --------------------------

struct TrainingRun {
    std::vector<double> losses, norms;
    std::vector<float> params, m, v;
};

// Small, and odd: 35 x (1001 + 32 + 2 x (12 x 35 + 13) + 2) = 66535 parameters, which no world of
// 2, 3 or 4 divides, so that the last ZeRO-1 shard is short.
gpt::GPTConfig small_config() {
    gpt::GPTConfig c;
    c.max_seq_len = 32;
    c.vocab_size = 1001;
    c.n_layer = 2;
    c.n_head = 5;
    c.n_embd = 35;
    return c;
}

// Micro-batch i of step s: N*B rows of T+1 random tokens. Rank r of N reads rows [r*B, (r+1)*B),
// as the data loader gives it (docs/formats.md): the windows of a step, in rank order.
std::vector<gpt::Batch> step_batches(int step, int k, int rows, int T, int first_row, int count) {
    std::vector<gpt::Batch> out(k);
    for (int i = 0; i < k; ++i) {
        gpt::Rng rng(1000 + 17 * step + i);
        std::vector<std::vector<int>> all(rows);
        for (auto& row : all)
            for (int t = 0; t <= T; ++t) row.push_back(int(rng.below(1001)));
        for (int r = first_row; r < first_row + count; ++r) {
            out[i].inputs.insert(out[i].inputs.end(), all[r].begin(), all[r].end() - 1);
            out[i].targets.insert(out[i].targets.end(), all[r].begin() + 1, all[r].end());
        }
    }
    return out;
}

// `steps` steps from step `from` of one model (rows [first_row, first_row + B) of each batch).
template <class Model>
void train(Model& model, TrainingRun& run, int from, int steps, int k, int rows, int B, int T) {
    gpt::AdamWSettings adamw;
    adamw.grad_clip = 0.5f;  // clipping on: the norm must be the norm of all gradients, not of a shard
    const float scale = 1.0f / float(k * rows * T);
    for (int s = from; s < from + steps; ++s) {
        const int first_row = model.parallel().rank() * B;
        const gpt::StepResult r =
            model.train_step(step_batches(s, k, rows, T, first_row, B), B, T, scale, adamw, 3e-3f, s + 1);
        run.losses.push_back(r.loss);
        run.norms.push_back(r.grad_norm);
    }
}

void finish(GPT<CpuReference>& model, TrainingRun& run) {
    run.params = model.parameters();
    run.m = model.optimizer_m();
    run.v = model.optimizer_v();
}

TrainingRun one_process(int rows, int T, int k, int steps) {
    const gpt::GPTConfig config = small_config();
    GPT<CpuReference> model(config, rows, T, k);
    model.set_parameters(gpt::init_parameters(config, 5));
    TrainingRun run;
    train(model, run, 0, steps, k, rows, rows, T);
    finish(model, run);
    return run;
}

TrainingRun several_processes(int world, int zero, int B, int T, int k, int steps) {
    const gpt::GPTConfig config = small_config();
    std::vector<TrainingRun> runs(world);
    run_ranks(world, [&](int r) {
        gpt::HostDataParallel parallel(gpt::ParallelSettings{zero}, launch(r, world));
        GPT<CpuReference> model(config, B, T, k, &parallel);
        model.set_parameters(gpt::init_parameters(config, 5));
        train(model, runs[r], 0, steps, k, world * B, B, T);
        finish(model, runs[r]);
    });
    // Every process reports the same step results and ends with the same state.
    for (int r = 1; r < world; ++r) {
        EXPECT_EQ(runs[r].losses, runs[0].losses) << "rank " << r;
        EXPECT_EQ(runs[r].norms, runs[0].norms) << "rank " << r;
        EXPECT_EQ(runs[r].params, runs[0].params) << "rank " << r;
        EXPECT_EQ(runs[r].m, runs[0].m) << "rank " << r;
    }
    return runs[0];
}

// Summing per process and then over processes adds in another order than one process does:
// equal within the fp32 model tolerance, not bit for bit.
void expect_same_training(const TrainingRun& actual, const TrainingRun& expected) {
    const double tol = gpt::test::model_rel_l2(gpt::Precision::FP32);
    EXPECT_TRUE(gpt::test::curves_close("losses", actual.losses, expected.losses, tol));
    EXPECT_TRUE(gpt::test::curves_close("gradient norms", actual.norms, expected.norms, tol));
    EXPECT_TRUE(gpt::test::rel_l2_close("parameters", actual.params, expected.params, tol));
    EXPECT_TRUE(gpt::test::rel_l2_close("AdamW m", actual.m, expected.m, tol));
    EXPECT_TRUE(gpt::test::rel_l2_close("AdamW v", actual.v, expected.v, tol));
}

struct Case {
    int world, zero, k;
};

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, NProcessesOfBatchBTrainLikeOneOfBatchNB) {
    const Case c = GetParam();
    const int B = 2, T = 16, steps = 3;
    if (c.zero == 1)  // the shards must not come out even: the last one is short
        ASSERT_NE(gpt::ParamLayout(small_config()).total() % c.world, 0u);
    const TrainingRun expected = one_process(c.world * B, T, c.k, steps);
    const TrainingRun actual = several_processes(c.world, c.zero, B, T, c.k, steps);
    expect_same_training(actual, expected);
}

INSTANTIATE_TEST_SUITE_P(WorldZeroMicroBatches, DataParallel,
                         ::testing::Values(Case{2, 0, 1}, Case{3, 0, 2}, Case{4, 0, 1}, Case{2, 1, 1}, Case{3, 1, 2},
                                           Case{4, 1, 1}),
                         [](const auto& info) {
                             return "world" + std::to_string(info.param.world) + "_zero" +
                                    std::to_string(info.param.zero) + "_micro" + std::to_string(info.param.k);
                         });

// A checkpoint holds the whole state whoever wrote it: written by 3 sharded processes, it goes on
// in 2, as it would have in 1.
TEST(DataParallelCheckpoint, MovesBetweenNumbersOfProcesses) {
    const gpt::GPTConfig config = small_config();
    const int rows = 6, T = 16, k = 1;
    const TrainingRun straight = one_process(rows, T, k, 4);

    TrainingRun saved;
    run_ranks(3, [&](int r) {
        gpt::HostDataParallel parallel(gpt::ParallelSettings{1}, launch(r, 3));
        GPT<CpuReference> model(config, rows / 3, T, k, &parallel);
        model.set_parameters(gpt::init_parameters(config, 5));
        TrainingRun run;
        train(model, run, 0, 2, k, rows, rows / 3, T);
        finish(model, run);  // every process gathers; rank 0 would write the file
        if (r == 0) saved = run;
    });
    TrainingRun resumed;
    run_ranks(2, [&](int r) {
        gpt::HostDataParallel parallel(gpt::ParallelSettings{1}, launch(r, 2));
        GPT<CpuReference> model(config, rows / 2, T, k, &parallel);
        model.set_parameters(saved.params);
        model.set_optimizer_state(saved.m, saved.v);
        TrainingRun run;
        train(model, run, 2, 2, k, rows, rows / 2, T);
        finish(model, run);
        if (r == 0) resumed = run;
    });
    resumed.losses.insert(resumed.losses.begin(), saved.losses.begin(), saved.losses.end());
    resumed.norms.insert(resumed.norms.begin(), saved.norms.begin(), saved.norms.end());
    expect_same_training(resumed, straight);
}

}  // namespace
