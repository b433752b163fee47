// Writes the bad inputs of the bad-input tests (tests/cpu/CMakeLists.txt) into OUT_DIR: data
// directories with one defect each, and broken checkpoints. Each test runs a tool on one of them
// and expects a one-line error naming the file and a non-zero exit.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "util/error.h"
#include "util/rng.h"

namespace fs = std::filesystem;

namespace {

std::vector<int> tokens(size_t n, uint64_t seed) {
    gpt::Rng rng(seed);
    std::vector<int> t(n);
    for (auto& x : t) x = static_cast<int>(rng.below(50257));
    return t;
}

// A valid train + val pair; the defects are applied on top of copies of it.
void good_data(const fs::path& dir, size_t val_tokens = 4000) {
    fs::create_directories(dir);
    gpt::write_shard((dir / "d_train_000000.bin").string(), tokens(20000, 1));
    gpt::write_shard((dir / "d_val_000000.bin").string(), tokens(val_tokens, 2));
}

void fifo(const fs::path& path) {
    if (mkfifo(path.c_str(), 0644) != 0) throw gpt::Error("cannot make the FIFO " + path.string());
}

void poke(const fs::path& file, std::streamoff at, int32_t value) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.write(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    try {
        const fs::path out = argv[1];
        fs::remove_all(out);
        good_data(out / "good");
        fs::create_directories(out / "empty");

        good_data(out / "bad_magic");
        poke(out / "bad_magic" / "d_train_000000.bin", 0, 12345);

        good_data(out / "truncated");
        fs::resize_file(out / "truncated" / "d_train_000000.bin", 1024 + 2 * 20000 - 7);

        good_data(out / "wide_tokens");  // version 2: not the uint16 tokens of GPT-2 shards
        poke(out / "wide_tokens" / "d_train_000000.bin", 4, 2);

        good_data(out / "bad_token");
        std::vector<int> t = tokens(20000, 3);
        t[1234] = 60000;  // fits uint16, but not GPT-2's vocabulary
        gpt::write_shard((out / "bad_token" / "d_train_000000.bin").string(), t);

        good_data(out / "small_val", 20);  // fewer tokens than one validation batch

        gpt::Checkpoint ck;
        ck.config = gpt::config_by_name("micro");
        ck.params = gpt::init_parameters(ck.config, 1);
        gpt::save_checkpoint((out / "params_only.ckpt").string(), ck);  // valid, but no optimizer state
        const std::string corrupt = (out / "corrupt.ckpt").string();
        gpt::save_checkpoint(corrupt, ck);
        {
            std::fstream f(corrupt, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(1024 + 4 * 1000);
            f.put(0x5A);
        }
        const std::string truncated = (out / "truncated.ckpt").string();
        gpt::save_checkpoint(truncated, ck);
        fs::resize_file(truncated, fs::file_size(truncated) / 2);
        {
            std::ofstream f(out / "not_a_checkpoint.ckpt");
            f << "hello\n";
        }

        // Paths that are not regular files: a FIFO blocks whoever opens it until a writer
        // comes, so every reader must refuse it by its type, before opening it.
        fifo(out / "fifo");
        good_data(out / "fifo_shard");
        fifo(out / "fifo_shard" / "d_train_000001.bin");
        good_data(out / "directory_shard");
        fs::create_directories(out / "directory_shard" / "d_train_000001.bin");
        fs::create_directories(out / "fifo_tokenizer");
        fifo(out / "fifo_tokenizer" / "encoder.json");
        fs::create_directories(out / "directory_tokenizer" / "encoder.json");
        std::ofstream(out / "hello.txt") << "Hello, world.\n";
        std::printf("wrote bad inputs into %s\n", out.string().c_str());
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
