// Writes the inputs of the reference case (common/testing/reference_case.h) for the PyTorch
// reference: DIR/init.ckpt and DIR/batch.bin (a shard of B*T + 1 tokens).
#include <cstdio>
#include <filesystem>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "testing/reference_case.h"
#include "util/error.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    try {
        const std::string dir = argv[1];
        std::filesystem::create_directories(dir);
        const gpt::test::ReferenceCase c = gpt::test::overfit_case();
        gpt::Checkpoint ck;
        ck.config = c.config;
        ck.params = c.params;
        gpt::save_checkpoint(dir + "/init.ckpt", ck);
        gpt::write_shard(dir + "/batch.bin", c.tokens);
        std::printf("wrote %s/init.ckpt (%s) and %s/batch.bin (%zu tokens)\n", dir.c_str(),
                    c.config.describe().c_str(), dir.c_str(), c.tokens.size());
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
