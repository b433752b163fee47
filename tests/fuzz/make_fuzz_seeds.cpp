// Makes the corpus folder of each fuzz target, OUT_DIR/<target>/, and writes seeds in the
// current file formats there with the project's own writers: a token shard, checkpoints of a
// tiny model with and without optimizer state, and llm.c model files of a tiny model (fp32 and
// bf16, a few kilobytes: a micro model's would be 13 MB).
// The committed seeds (tests/fuzz/corpus) stay valid inputs after a format changes, but only
// these reach past the version check of the new one.
#include <cstdio>
#include <filesystem>
#include <vector>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
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
        for (const char* target : {"json", "shard", "checkpoint", "llmc", "tokenizer"}) fs::create_directories(out / target);
        gpt::write_shard((out / "shard" / "current.bin").string(), {50256, 464, 3290, 318, 257, 1332, 13, 0, 1});

        gpt::Checkpoint c;
        c.config = gpt::GPTConfig{4, 10, 1, 2, 4};  // maxT, V, L, H, C: a few hundred bytes
        c.step = 3;
        c.params = gpt::init_parameters(c.config, 1);
        gpt::save_checkpoint((out / "checkpoint" / "current.ckpt").string(), c);
        c.m.assign(c.params.size(), 0.25f);
        c.v.assign(c.params.size(), 0.0625f);
        gpt::save_checkpoint((out / "checkpoint" / "current_adamw.ckpt").string(), c);

        // load_model_file's two kinds: llm.c files (Vp > V, and Vp == V) and a checkpoint.
        const gpt::GPTConfig tiny{4, 16, 1, 1, 8};
        const std::vector<float> tiny_params = gpt::init_parameters(tiny, 2);
        gpt::save_llmc_model((out / "llmc" / "current.bin").string(), tiny, tiny_params, 32);
        gpt::save_llmc_model((out / "llmc" / "current_bf16.bin").string(), tiny, tiny_params, 16,
                             gpt::kLlmcVersionBf16);
        gpt::Checkpoint tiny_checkpoint;
        tiny_checkpoint.config = tiny;
        tiny_checkpoint.params = tiny_params;
        gpt::save_checkpoint((out / "llmc" / "current.ckpt").string(), tiny_checkpoint);
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
