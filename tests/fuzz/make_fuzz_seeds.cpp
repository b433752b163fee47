// Makes the corpus folder of each fuzz target, OUT_DIR/<target>/, and writes seeds in the
// current file formats there with the project's own writers: a token shard, and checkpoints of
// a tiny model with and without optimizer state.
// The committed seeds (tests/fuzz/corpus) stay valid inputs after a format changes, but only
// these reach past the version check of the new one.
#include <cstdio>
#include <filesystem>
#include <vector>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "util/error.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    namespace fs = std::filesystem;
    try {
        const fs::path out = argv[1];
        for (const char* target : {"json", "shard", "checkpoint", "tokenizer"}) fs::create_directories(out / target);
        gpt::write_shard((out / "shard" / "current.bin").string(), {50256, 464, 3290, 318, 257, 1332, 13, 0, 1});

        gpt::Checkpoint c;
        c.config = gpt::GPTConfig{4, 10, 1, 2, 4};  // maxT, V, L, H, C: a few hundred bytes
        c.step = 3;
        c.params = gpt::init_parameters(c.config, 1);
        gpt::save_checkpoint((out / "checkpoint" / "current.ckpt").string(), c);
        c.m.assign(c.params.size(), 0.25f);
        c.v.assign(c.params.size(), 0.0625f);
        gpt::save_checkpoint((out / "checkpoint" / "current_adamw.ckpt").string(), c);
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
