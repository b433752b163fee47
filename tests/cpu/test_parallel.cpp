// Several processes training together, on the CPU: the bookkeeping stage 06 does over NCCL
// (disjoint windows, gradients summed per block, ZeRO-1 shards, the norm over shards, gradient
// accumulation, checkpoints that move between numbers of processes) done by the CPU reference
// over real TCP connections (common/dist). The ranks run as threads of this test, each with its
// own model and its own connection to rank 0, exactly as separate processes would.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
#include "model/config.h"
#include "model/params.h"
#include "testing/compare.h"
#include "testing/curve.h"
#include "testing/tolerance.h"
#include "train/gpt.h"
#include "train/parallel.h"
#include "util/error.h"
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
    ~Env() {
        for (auto& [k, v] : vars_) ::unsetenv(k);
    }
    std::vector<std::pair<const char*, const char*>> vars_;
};

TEST(Launch, ReadsEachLauncher) {
    {
        const gpt::dist::Launch l = gpt::dist::launch_from_environment();
        EXPECT_EQ(l.world, 1);
        EXPECT_EQ(l.rank, 0);
    }
    {
        Env e({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}});
        const gpt::dist::Launch l = gpt::dist::launch_from_environment();
        EXPECT_EQ(l.rank, 3);
        EXPECT_EQ(l.world, 8);
        EXPECT_EQ(l.local_rank, 1);
    }
    {
        Env e({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "16"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "5"}});
        const gpt::dist::Launch l = gpt::dist::launch_from_environment();
        EXPECT_EQ(l.launcher, "mpirun");
        EXPECT_EQ(l.rank, 5);
        EXPECT_EQ(l.world, 16);
    }
    {
        Env e({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "64"}, {"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_LOCALID", "1"}});
        const gpt::dist::Launch l = gpt::dist::launch_from_environment();
        EXPECT_EQ(l.launcher, "srun");
        EXPECT_EQ(l.world, 16);  // the step's processes, not the allocation's
        EXPECT_EQ(l.local_rank, 1);
    }
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
