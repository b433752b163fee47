// gpt_init: writes a freshly initialised model as a checkpoint, so that several trainers (every
// stage, the PyTorch reference) can start from exactly the same parameters.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/checkpoint.h"
#include "model/params.h"
#include "util/error.h"
#include "util/file.h"

int main(int argc, char** argv) {
    std::string model = "d12", out;
    unsigned long long seed = 1337;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string arg = argv[i];
            if (arg == "--help" || arg == "-h") {
                std::printf(
                    "usage: gpt_init --out PATH [--model NAME] [--seed S]\n\n"
                    "Writes the seeded GPT-2 initialisation of docs/formats.md as a checkpoint.\n"
                    "  --out PATH    checkpoint to write (required)\n"
                    "  --model NAME  micro, tiny, d12, d24, d36, d48 [d12]\n"
                    "  --seed S      initialisation seed; the trainers' --seed default is the same [1337]\n");
                return 0;
            }
            if (i + 1 >= argc) throw gpt::Error("option " + arg + " needs a value (see --help)");
            const std::string value = argv[++i];
            if (arg == "--model") model = value;
            else if (arg == "--out") out = value;
            else if (arg == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
            else throw gpt::Error("unknown option '" + arg + "' (see --help)");
        }
        if (out.empty()) throw gpt::Error("--out PATH is required (see --help)");
        gpt::require_writable_path(out, "--out");
        gpt::Checkpoint ck;
        ck.config = gpt::config_by_name(model);
        ck.params = gpt::init_parameters(ck.config, seed);
        gpt::save_checkpoint(out, ck);
        std::printf("wrote %s: %s, seed %llu, %zu parameters\n", out.c_str(), ck.config.describe().c_str(), seed,
                    ck.params.size());
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
