// Tests of the shared helpers every reader of user files goes through: opening a file the user
// named (common/util/file.h) and the JSON reader (common/util/json.h), on the paths and the
// hostile contents a user can hand them. Also the GPU peak table (common/util/peak_flops.h) and
// the GPUs each stage refuses (common/util/compute_capability.h), and the clock reader's words and
// its answer where there is no driver (common/util/gpu_clock.h), which need no GPU to check.
#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testing/compare.h"
#include "testing/reference_case.h"
#include "util/compute_capability.h"
#include "util/error.h"
#include "util/file.h"
#include "util/gpu_clock.h"
#include "util/json.h"
#include "util/peak_flops.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

using test::error_of;

fs::path scratch_dir() { return test::scratch_dir("test_util"); }

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// --- files the user names ------------------------------------------------------------------

TEST(UserFiles, RegularFileIsReadWhole) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "a.txt").string();
    std::ofstream(path, std::ios::binary) << "hello";
    EXPECT_EQ(read_regular_file(path, "input"), "hello");
    require_regular_file(path, "input");
    require_writable_path(path, "--out");
    require_writable_path((dir / "new.txt").string(), "--out");  // absent: will be created
    // A missing directory is made now, so that the write at the end of the work finds it.
    require_writable_path((dir / "runs" / "a" / "x.ckpt").string(), "--save");
    EXPECT_TRUE(fs::is_directory(dir / "runs" / "a"));
    EXPECT_CONTAINS(error_of([&] { require_writable_path(path + "/x.ckpt", "--save"); }), "is a regular file, not a directory");
}

TEST(UserFiles, EveryOtherKindIsRefusedByName) {
    const fs::path dir = scratch_dir();
    const std::string fifo = (dir / "fifo").string();
    ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
    // A FIFO without a writer: opening it would block forever, so this returns only if the
    // type is checked first.
    EXPECT_CONTAINS(error_of([&] { read_regular_file(fifo, "input"); }), "input " + fifo + ": is a FIFO");
    EXPECT_CONTAINS(error_of([&] { open_regular_file(dir.string(), "checkpoint"); }), "is a directory");
    EXPECT_CONTAINS(error_of([&] { read_regular_file("/dev/zero", "input"); }), "is a character device");
    EXPECT_CONTAINS(error_of([&] { read_regular_file("/dev/null", "input"); }), "is a character device");
    EXPECT_CONTAINS(error_of([&] { require_writable_path(dir.string(), "--out"); }), "is a directory");
    EXPECT_CONTAINS(error_of([&] { require_writable_path(fifo, "--out"); }), "is a FIFO");
    EXPECT_CONTAINS(error_of([&] { require_directory(fifo, "data directory"); }), "is a FIFO (named pipe), not a directory");
    EXPECT_CONTAINS(error_of([&] { require_directory("/dev/null", "data directory"); }), "not a directory");

    // A link is followed: to a FIFO it is a FIFO, dangling it is missing.
    fs::create_symlink(fifo, dir / "link");
    EXPECT_CONTAINS(error_of([&] { read_regular_file((dir / "link").string(), "input"); }), "is a FIFO");
    fs::create_symlink(dir / "nothing", dir / "dangling");
    EXPECT_THROW(read_regular_file((dir / "dangling").string(), "input"), MissingFile);
}

TEST(UserFiles, MissingIsItsOwnKindOfError) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "none").string();
    EXPECT_THROW(read_regular_file(path, "input"), MissingFile);
    EXPECT_THROW(require_directory(path, "data directory"), MissingFile);
    EXPECT_CONTAINS(error_of([&] { read_regular_file(path, "input"); }), "input " + path + ": not found");
    // A broken file is an Error, but not a MissingFile.
    try {
        read_regular_file(dir.string(), "input");
        ADD_FAILURE() << "a directory was read";
    } catch (const MissingFile&) {
        ADD_FAILURE() << "a directory reported as missing";
    } catch (const Error&) {
    }
}

TEST(UserFiles, UnreadableFileIsNamed) {
    if (geteuid() == 0) GTEST_SKIP() << "root reads files whatever their permissions";
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "secret").string();
    std::ofstream(path) << "x";
    fs::permissions(path, fs::perms::none);
    EXPECT_CONTAINS(error_of([&] { read_regular_file(path, "input"); }), "cannot open (Permission denied)");
}

// The names in DIR, to see that a check left nothing behind.
std::set<std::string> names_in(const fs::path& dir) {
    std::set<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
}

// A writable path is checked by opening the file the save writes (PATH.tmp), which must change
// nothing that was there and leave nothing that was not.
TEST(UserFiles, WritablePathCheckChangesNothing) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "x.ckpt").string();
    std::ofstream(path, std::ios::binary) << "the previous checkpoint";
    std::ofstream(path + ".tmp", std::ios::binary) << "half of a save that was killed";
    require_writable_path(path, "--save");
    EXPECT_EQ(read_regular_file(path, "test file"), "the previous checkpoint");
    EXPECT_EQ(read_regular_file(path + ".tmp", "test file"), "half of a save that was killed");

    require_writable_path((dir / "new.ckpt").string(), "--save");
    EXPECT_EQ(names_in(dir), (std::set<std::string>{"x.ckpt", "x.ckpt.tmp"}));

    // ReplacingFile could not write through a .tmp that is a directory.
    fs::create_directory(dir / "y.ckpt.tmp");
    EXPECT_CONTAINS(error_of([&] { require_writable_path((dir / "y.ckpt").string(), "--save"); }),
                    "y.ckpt.tmp is a directory, cannot write the file through it");
}

// Two processes that check one output at once (tests that write the same file) see each other's
// PATH.tmp come and go: neither may take that for a path it cannot write.
TEST(UserFiles, WritablePathCheckedTwiceAtOnce) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "shared.bin").string();
    std::mutex mutex;
    std::vector<std::string> errors;
    auto check = [&] {
        for (int i = 0; i < 3000; ++i) {
            try {
                require_writable_path(path, "--out");
            } catch (const Error& e) {
                std::lock_guard<std::mutex> lock(mutex);
                errors.push_back(e.what());
            }
        }
    };
    std::thread a(check), b(check);
    a.join();
    b.join();
    EXPECT_TRUE(errors.empty()) << errors.size() << " checks failed, the first: " << errors.front();
    EXPECT_TRUE(names_in(dir).empty());
}

// access(W_OK) says yes to root there, yet no file can be made in /proc.
TEST(UserFiles, PathInProcIsRefused) {
    if (!fs::exists("/proc/self")) GTEST_SKIP() << "/proc is not mounted";
    EXPECT_CONTAINS(error_of([&] { require_writable_path("/proc/x.ckpt", "--save"); }),
                    "--save /proc/x.ckpt: cannot create /proc/x.ckpt.tmp (");
    EXPECT_FALSE(fs::exists("/proc/x.ckpt.tmp"));
}

TEST(UserFiles, ReadOnlyDirectoryIsRefused) {
    if (geteuid() == 0) GTEST_SKIP() << "root writes into any directory";
    const fs::path dir = scratch_dir();
    fs::create_directory(dir / "ro");
    fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    const std::string path = (dir / "ro" / "x.ckpt").string();
    EXPECT_CONTAINS(error_of([&] { require_writable_path(path, "--save"); }),
                    "--save " + path + ": cannot create " + path + ".tmp (Permission denied)");
    fs::permissions(dir / "ro", fs::perms::owner_all);
    EXPECT_TRUE(names_in(dir / "ro").empty());
}

TEST(UserFiles, FileLargerThanTheLimitIsRefused) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "big").string();
    std::ofstream(path, std::ios::binary) << std::string(100000, 'x');
    EXPECT_EQ(read_regular_file(path, "input", 100000).size(), 100000u);
    EXPECT_CONTAINS(error_of([&] { read_regular_file(path, "input", 99999); }), "larger than 99999 bytes");
}

// --- files written whole or not at all ---------------------------------------------------------

std::string contents(const std::string& path) { return read_regular_file(path, "test file"); }

TEST(ReplacingFile, CommitReplacesTheFileWhole) {
    const std::string path = (scratch_dir() / "out.txt").string();
    std::ofstream(path, std::ios::binary) << "old";
    {
        ReplacingFile file(path, "--out");
        file.write("new ");
        file.write(std::string(100000, 'x'));
        EXPECT_EQ(contents(path), "old");  // nothing is PATH until the commit
        EXPECT_TRUE(fs::exists(path + ".tmp"));
        file.commit();
    }
    EXPECT_EQ(contents(path), "new " + std::string(100000, 'x'));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(ReplacingFile, EndedBeforeTheCommitLeavesTheOldFile) {
    const std::string path = (scratch_dir() / "kept.txt").string();
    std::ofstream(path, std::ios::binary) << "old";
    try {
        ReplacingFile file(path, "--out");
        file.write("half of it");
        throw Error("the work failed");  // the destructor runs before the commit
    } catch (const Error&) {
    }
    EXPECT_EQ(contents(path), "old");
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    ReplacingFile file(path, "--out");
    file.write("half");
    EXPECT_CONTAINS(error_of([&] { file.fail("interrupted (SIGINT)"); }),
                    "--out " + path + " not written: interrupted (SIGINT) (" + path + " is left as it was)");
    EXPECT_FALSE(fs::exists(path + ".tmp"));
    EXPECT_CONTAINS(error_of([&] { file.write("more"); }), "after commit() or a failure");
    EXPECT_EQ(contents(path), "old");
}

// A full disk, made with a file size limit: the write error is reported, the file removed.
TEST(ReplacingFile, WriteErrorLeavesTheOldFile) {
    const std::string path = (scratch_dir() / "full.txt").string();
    std::ofstream(path, std::ios::binary) << "old";
    struct rlimit before = {};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
    struct rlimit small = before;
    small.rlim_cur = 4096;
    void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    std::string message;
    {
        ReplacingFile file(path, "--out");
        message = error_of([&] { file.write(std::string(10000, 'x')); });
    }
    setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_CONTAINS(message, "--out " + path + " not written: write error (File too large)");
    EXPECT_EQ(contents(path), "old");
    EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(ReplacingFile, RefusesWhatIsNotAFile) {
    const fs::path dir = scratch_dir();
    EXPECT_CONTAINS(error_of([&] { ReplacingFile file(dir.string(), "--out"); }), "is a directory");
    EXPECT_FALSE(fs::exists(dir.string() + ".tmp"));
}

// --- the JSON reader on hostile text ---------------------------------------------------------

TEST(JsonReader, ReadsWhatTheProjectWrites) {
    const Json j = Json::parse(R"({"losses": [10.5, -0.25e-3, 1E2, 0, NaN, null], "n": -0, "s": "a\u00e9\ud83d\ude00"})");
    const std::vector<double> losses = j["losses"].numbers();
    ASSERT_EQ(losses.size(), 6u);
    EXPECT_EQ(losses[0], 10.5);
    EXPECT_EQ(losses[1], -0.25e-3);
    EXPECT_EQ(losses[2], 100.0);
    EXPECT_TRUE(std::isnan(losses[4]) && std::isnan(losses[5]));
    EXPECT_EQ(j["s"].string, "a\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(JsonReader, DeepNestingIsAnErrorNotAStackOverflow) {
    // Depth kMaxDepth is fine; one more is refused. A million levels would overflow the stack
    // of a reader that recursed without a bound.
    const int ok = Json::kMaxDepth;
    EXPECT_NO_THROW(Json::parse(std::string(ok, '[') + std::string(ok, ']')));
    EXPECT_CONTAINS(error_of([&] { Json::parse(std::string(ok + 1, '[') + std::string(ok + 1, ']')); }),
                    "nested deeper than");
    EXPECT_CONTAINS(error_of([] { Json::parse(std::string(1000000, '[')); }), "nested deeper than");
    std::string objects;
    for (int i = 0; i < 1000000; ++i) objects += "{\"a\":";
    EXPECT_CONTAINS(error_of([&] { Json::parse(objects); }), "nested deeper than");
}

TEST(JsonReader, ValueCountAndSizeAreBounded) {
    std::string many = "[";
    for (size_t i = 0; i <= Json::kMaxValues; ++i) many += "0,";
    many += "0]";
    EXPECT_CONTAINS(error_of([&] { Json::parse(many); }), "more than");
    EXPECT_CONTAINS(error_of([] { Json::parse(std::string(Json::kMaxBytes + 1, ' ')); }), "bytes, more than");
}

TEST(JsonReader, NumbersMustBeJsonNumbers) {
    for (const char* bad : {"01", "1.", ".5", "-", "+1", "0x10", "1e", "1e+", "-inf", "--1", "1.e3"})
        EXPECT_CONTAINS(error_of([&] { Json::parse(std::string("[") + bad + "]"); }), "malformed JSON") << bad;
    EXPECT_EQ(Json::parse("[-0.5e-3]").array[0].number, -0.5e-3);
    EXPECT_EQ(Json::parse("[123456789012345678901234567890]").array[0].number, 123456789012345678901234567890.0);
}

TEST(JsonReader, TruncatedAndBrokenTextGivesOneLine) {
    for (const char* bad : {"", "[", "{", "{\"a\"", "{\"a\":", "[1,]", "{\"a\":1,}", "\"abc", "\"\\u12", "\"\\ud800\"",
                            "tru", "[1] x", "{1:2}", "\"a\nb\""})
        EXPECT_CONTAINS(error_of([&] { Json::parse(bad); }), "malformed JSON") << bad;
}

// Found by the fuzzer (tests/fuzz): the offending byte went into the message as it was, so a
// backslash before a newline made a two-line error.
TEST(JsonReader, UnprintableBytesAreShownByTheirCode) {
    EXPECT_CONTAINS(error_of([] { Json::parse("\"\\\n\""); }), "unknown escape: backslash, then byte 0x0a");
    EXPECT_CONTAINS(error_of([] { Json::parse("[\x01]"); }), "unexpected byte 0x01");
    EXPECT_CONTAINS(error_of([] { Json::parse("[x]"); }), "unexpected 'x'");
}

// JSON is UTF-8 (the Unicode standard's well-formed sequences only), and what the project
// writes as JSON (json_string: the log's samples may stop inside a character) reads back.
TEST(JsonReader, TextIsUtf8AndWhatIsWrittenReadsBack) {
    EXPECT_NO_THROW(Json::parse("[\"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]"));  // 2, 3 and 4 bytes
    for (const char* bad : {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\xc3", "\x80"})
        EXPECT_CONTAINS(error_of([&] { Json::parse(std::string("[\"x") + bad + "\"]"); }),
                        "JSON text is not UTF-8: byte 3")
            << bad;
    const std::string sample = std::string("cut \xe2\x82") + " overlong \xc0\xaf";
    EXPECT_EQ(Json::parse(json_string(sample)).string, "cut \xef\xbf\xbd\xef\xbf\xbd overlong \xef\xbf\xbd\xef\xbf\xbd");
    EXPECT_EQ(sanitize_utf8("caf\xc3\xa9"), "caf\xc3\xa9");
}

TEST(JsonReader, FileErrorsNameTheFile) {
    const fs::path dir = scratch_dir();
    const std::string path = (dir / "bad.json").string();
    std::ofstream(path) << "[1, 2";
    EXPECT_CONTAINS(error_of([&] { Json::parse_file(path); }), "JSON file " + path + ": malformed JSON");
    EXPECT_CONTAINS(error_of([&] { Json::parse_file(dir.string()); }), "is a directory");
}

// --- the MFU denominator: the peak table, the estimate, the GPUs the stages refuse ---------

// Names as the GPUs report them (cudaDeviceProp::name, nvidia-smi).
TEST(PeakTable, EveryEntryIsFoundByTheNameItsGpuReports) {
    const struct {
        const char* name;
        const char* match;
        double tflops;
    } kGpus[] = {
        {"NVIDIA H100 80GB HBM3", "H100", 989},
        {"NVIDIA H100 PCIe", "H100 PCIe", 756},
        {"NVIDIA H100 NVL", "H100 NVL", 835},
        {"NVIDIA GH200 480GB", "GH200", 989},
        {"NVIDIA H200", "H200", 989},
        {"NVIDIA H200 NVL", "H200 NVL", 835},
        {"NVIDIA B200", "B200", 2250},
        {"NVIDIA A100-SXM4-40GB", "A100", 312},
        {"NVIDIA A100-SXM4-80GB", "A100", 312},
        {"NVIDIA A100-PCIE-40GB", "A100", 312},
        {"NVIDIA A100 80GB PCIe", "A100", 312},
        {"NVIDIA A800-SXM4-80GB", "A800", 312},
        {"NVIDIA L40S", "L40S", 362},
        {"NVIDIA L40", "L40", 181},
        {"NVIDIA L4", "L4", 121},
        {"NVIDIA GeForce RTX 4090", "RTX 4090", 165},
        {"NVIDIA GeForce RTX 3090", "RTX 3090", 71},
        {"NVIDIA A10G", "A10G", 70},
        {"NVIDIA A10", "A10", 125},
    };
    std::set<std::string> found;
    for (const auto& gpu : kGpus) {
        EXPECT_EQ(peak_bf16_match(gpu.name), gpu.match) << gpu.name;
        EXPECT_EQ(peak_bf16_flops(gpu.name), gpu.tflops * 1e12) << gpu.name;
        found.insert(gpu.match);
    }
    const PeakEntry* t4 = find_peak("Tesla T4");  // listed, but with no bf16 peak
    ASSERT_NE(t4, nullptr);
    EXPECT_EQ(t4->tflops, 0);
    EXPECT_EQ(peak_bf16_flops("Tesla T4"), 0);
    EXPECT_EQ(peak_bf16_match("Tesla T4"), "");  // no peak, so no entry gave one
    found.insert(t4->match);
    for (const PeakEntry& entry : kPeakTable) EXPECT_EQ(found.count(entry.match), 1u) << entry.match << " untested";
}

TEST(PeakTable, UnknownNamesAndPartsOfWordsMatchNothing) {
    // "B200" is part of "GB200", "A10" of "A1000", "L4" of "L40G": parts of words are not matches.
    for (const char* name : {"", "NVIDIA GeForce RTX 3080", "NVIDIA RTX A6000", "Tesla V100-SXM2-16GB", "NVIDIA GB200",
                             "NVIDIA RTX A1000", "L40G"}) {
        EXPECT_EQ(find_peak(name), nullptr) << name;
        EXPECT_EQ(peak_bf16_flops(name), 0) << name;
        EXPECT_EQ(peak_bf16_match(name), "") << name;
    }
}

// The per-SM rates reproduce the data-sheet peaks from the SM counts and boost clocks.
TEST(PeakEstimate, ReproducesTheDataSheetPeaks) {
    const struct {
        const char* gpu;
        int major, minor, sms, clock_khz;
        double tflops;
    } kGpus[] = {
        {"A100", 8, 0, 108, 1410000, 312},      {"RTX 3090", 8, 6, 82, 1695000, 71},
        {"RTX 4090", 8, 9, 128, 2520000, 165},  {"H100 SXM", 9, 0, 132, 1830000, 989},
    };
    for (const auto& g : kGpus)
        EXPECT_NEAR(estimate_bf16_peak(g.major, g.minor, g.sms, g.clock_khz) / 1e12, g.tflops, 0.03 * g.tflops)
            << g.gpu;
}

TEST(PeakEstimate, UnknownArchitecturesTakeTheNewestKnownRate) {
    EXPECT_EQ(bf16_flops_per_sm_per_clock(7, 5), 0);  // T4: no bf16 tensor cores
    EXPECT_EQ(bf16_flops_per_sm_per_clock(8, 7), 2048);
    EXPECT_EQ(bf16_flops_per_sm_per_clock(9, 1), 4096);
    EXPECT_EQ(bf16_flops_per_sm_per_clock(10, 3), 8192);
    EXPECT_EQ(bf16_flops_per_sm_per_clock(12, 0), 512);
    EXPECT_EQ(bf16_flops_per_sm_per_clock(15, 0), bf16_flops_per_sm_per_clock(12, 0));
}

TEST(PeakEstimate, NonsenseGivesNoPeak) {
    EXPECT_EQ(estimate_bf16_peak(8, 0, 0, 1410000), 0);
    EXPECT_EQ(estimate_bf16_peak(8, 0, -108, 1410000), 0);
    EXPECT_EQ(estimate_bf16_peak(8, 0, 108, 0), 0);
    EXPECT_EQ(estimate_bf16_peak(8, 0, 108, -1), 0);
    EXPECT_EQ(estimate_bf16_peak(7, 5, 40, 1590000), 0);                // no bf16 tensor cores
    EXPECT_EQ(estimate_bf16_peak(10, 0, 2147483647, 2147483647), 0);  // far above 10 PFLOP/s
    EXPECT_EQ(estimate_bf16_peak(8, 0, 1, 1000), 0);                    // a 1 MHz clock
}

TEST(PeakEstimate, TheLogSaysWhereThePeakCameFrom) {
    const PeakFlops known = bf16_peak("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980000);
    EXPECT_EQ(known.flops, 989e12);  // the data sheet, not SMs x clock
    EXPECT_EQ(known.source, "H100");
    EXPECT_EQ(known.warning, "");

    const PeakFlops guessed = bf16_peak("NVIDIA GeForce RTX 3080", 8, 6, 68, 1710000);
    EXPECT_NEAR(guessed.flops, 68 * 1.71e9 * 512, 1e6);
    EXPECT_EQ(guessed.source, "estimate");
    EXPECT_EQ(guessed.warning,
              "warning: GPU NVIDIA GeForce RTX 3080 is not in the peak table of common/util/peak_flops.h; MFU uses "
              "an estimate of 60 TFLOP/s from its 68 SMs at 1.71 GHz (sm_86)");

    const PeakFlops none = bf16_peak("Mystery GPU", 8, 0, 0, 0);
    EXPECT_EQ(none.flops, 0);
    EXPECT_EQ(none.source, "");
    EXPECT_EQ(none.warning,
              "warning: GPU Mystery GPU is not in the peak table of common/util/peak_flops.h; MFU is not reported");

    const PeakFlops t4 = bf16_peak("Tesla T4", 7, 5, 40, 1590000);  // known: no estimate, no warning
    EXPECT_EQ(t4.flops, 0);
    EXPECT_EQ(t4.source, "");
    EXPECT_EQ(t4.warning, "");

    // Not in the table, but before Ampere: no bf16 peak to miss, MFU n/a as for the T4, no warning.
    const PeakFlops turing = bf16_peak("NVIDIA GeForce RTX 2080 Ti", 7, 5, 68, 1545000);
    EXPECT_EQ(turing.flops, 0);
    EXPECT_EQ(turing.source, "");
    EXPECT_EQ(turing.warning, "");
}

// What stages 00 and 01 ask of the GPU (stages/*/stage.cuh): a T4 runs the first and not the second.
const GpuNeed kStage00Need{"stage 00_fp32_baseline", 75, "fp32 CUDA cores only"};
const GpuNeed kStage01Need{"stage 01_tf32", 80, "TF32 tensor cores"};

TEST(UnsupportedGpu, RefusedWithWhatItLacks) {
    EXPECT_EQ(gpu_refusal("Tesla T4", 7, 5, kStage00Need), "");
    EXPECT_EQ(gpu_refusal("Tesla T4", 7, 5, kStage01Need),
              "GPU Tesla T4 (sm_75) cannot run stage 01_tf32: it needs compute capability 8.0 (Ampere) or newer for "
              "TF32 tensor cores; stage 00 runs on this GPU (cmake --preset stage00)");
    EXPECT_EQ(gpu_refusal("NVIDIA GeForce RTX 2080 Ti", 7, 5, kStage00Need), "");

    // Older than CUDA 13 builds for: no stage runs, and the line says so instead of pointing at stage 00.
    EXPECT_EQ(gpu_refusal("Tesla V100-SXM2-16GB", 7, 0, kStage00Need),
              "GPU Tesla V100-SXM2-16GB (sm_70) cannot run stage 00_fp32_baseline: CUDA 13 builds for compute "
              "capability 7.5 (Turing) or newer, so no stage runs on this GPU");
    EXPECT_EQ(gpu_refusal("Tesla V100-SXM2-16GB", 7, 0, kStage01Need),
              "GPU Tesla V100-SXM2-16GB (sm_70) cannot run stage 01_tf32: it needs compute capability 8.0 (Ampere) "
              "or newer for TF32 tensor cores; no stage runs on this GPU, since CUDA 13 builds for compute "
              "capability 7.5 (Turing) or newer");

    const std::pair<int, int> kAmpereAndNewer[] = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}};
    for (const auto& [major, minor] : kAmpereAndNewer) {
        EXPECT_EQ(gpu_refusal("any", major, minor, kStage00Need), "") << major << minor;
        EXPECT_EQ(gpu_refusal("any", major, minor, kStage01Need), "") << major << minor;
    }
    EXPECT_EQ(gpu_refusal("NVIDIA GeForce RTX 3090", 8, 6, kStage01Need), "");
    // sm_100 is compute capability 10.0, not "sm_100 < 80" nor a 1.0 read from "100".
    EXPECT_EQ(gpu_refusal("NVIDIA B200", 10, 0, {"stage X", 90, "something of Hopper"}), "");
    EXPECT_CONTAINS(gpu_refusal("NVIDIA A100", 8, 0, {"stage X", 90, "something of Hopper"}),
                    "(sm_80) cannot run stage X: it needs compute capability 9.0 (Hopper) or newer for something");
}

// The GPU tests of a stage skip with one clause that tests/after_tests.cmake can read back from
// "<why>: GPU test skipped": no ':' or '"' in it, whatever the GPU's name.
TEST(UnsupportedGpu, TestSkipReasonIsOneClause) {
    EXPECT_EQ(gpu_test_skip_reason("Tesla T4", 7, 5, kStage00Need), "");
    EXPECT_EQ(gpu_test_skip_reason("Tesla T4", 7, 5, kStage01Need),
              "GPU Tesla T4 (sm_75) cannot run stage 01_tf32, which needs compute capability 8.0 (Ampere) or newer "
              "for TF32 tensor cores");
    EXPECT_EQ(gpu_test_skip_reason("Tesla V100-SXM2-16GB", 7, 0, kStage00Need),
              "GPU Tesla V100-SXM2-16GB (sm_70) cannot run stage 00_fp32_baseline, which needs compute capability "
              "7.5 (Turing) or newer with CUDA 13");
    const std::string odd = gpu_test_skip_reason("GPU \"A:B\"", 7, 5, {"stage 01_tf32", 80, "x: \"y\""});
    EXPECT_EQ(odd.find_first_of(":\""), std::string::npos) << odd;
    for (int major : {8, 9, 10, 12}) EXPECT_EQ(gpu_test_skip_reason("any", major, 0, kStage01Need), "") << major;
}

// What --help and the banner print on the "gpu" line.
TEST(UnsupportedGpu, NeedAsHelpSaysIt) {
    EXPECT_EQ(describe_gpu_need(kStage00Need), "needs compute capability 7.5 or newer (fp32 CUDA cores only)");
    EXPECT_EQ(describe_gpu_need(kStage01Need), "needs compute capability 8.0 or newer (TF32 tensor cores)");
    EXPECT_EQ(compute_capability_name(120), "12.0");
}

}  // namespace
}  // namespace gpt

TEST(GpuClock, ReasonsInWords) {
    EXPECT_EQ(gpt::clock_reason_names(0), "none");
    EXPECT_EQ(gpt::clock_reason_names(0x4), "power cap");
    EXPECT_EQ(gpt::clock_reason_names(0x1 | 0x20), "idle+sw thermal");
    EXPECT_EQ(gpt::clock_reason_names(0x40 | 0x1000), "hw thermal+0x1000");  // a bit NVML added later
}

// Without a driver (or for a bus id no GPU has) the reader has no readings and says why; nothing fails.
TEST(GpuClock, NoReadingsIsNotAnError) {
    gpt::GpuClockReader reader("0000:FF:1F.7");
    EXPECT_FALSE(reader.available());
    EXPECT_FALSE(reader.why_unavailable().empty());
    const gpt::GpuClock c = reader.read();
    EXPECT_FALSE(c.read);
    EXPECT_EQ(c.sm_mhz, 0u);
    EXPECT_EQ(c.reasons, 0u);
}
