// gpt_init: writes a freshly initialised model as a checkpoint, so that several trainers (every
// stage, the PyTorch reference) can start from exactly the same parameters.
#include <cstdio>
#include <string>

#include "model/checkpoint.h"
#include "model/params.h"
#include "util/cli.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

int main(int argc, char** argv) {
    std::string model = "d12", out;
    uint64_t seed = 1337;  // the trainers' --seed default
    try {
        const std::vector<gpt::cli::Option> options = {
            gpt::cli::required(gpt::cli::text("--out", "PATH", "checkpoint to write", out)),
            gpt::cli::text("--model", "NAME", "micro, tiny, d12, d24, d36, d48 (docs/formats.md)", model,
                           [](const std::string& v) { gpt::config_by_name(v); }),
            gpt::cli::whole("--seed", "S", "initialisation seed; the trainers' --seed default is the same", seed, 0),
        };
        if (gpt::cli::parse(argc, argv, options, false).help) {
            std::printf("usage: gpt_init --out PATH [--model NAME] [--seed S]\n\n"
                        "Writes the seeded GPT-2 initialisation of docs/formats.md as a checkpoint.\n\n"
                        "options (default in brackets):\n%s",
                        gpt::cli::describe(options).c_str());
            return 0;
        }
        gpt::require_writable_path(out, "--out");
        gpt::Checkpoint ck;
        ck.config = gpt::config_by_name(model);
        ck.params = gpt::init_parameters(ck.config, seed);
        gpt::save_checkpoint(out, ck);
        std::printf("wrote %s: %s, seed %llu, %s parameters\n", out.c_str(), ck.config.describe().c_str(),
                    static_cast<unsigned long long>(seed), gpt::with_commas(int64_t(ck.params.size())).c_str());
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
