// The shared main of every trainer. A stage's main file defines GPT_STAGE (the policy type)
// after including the stage header, then includes this file.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "train/eval_hellaswag.h"
#include "train/generate.h"
#include "model/checkpoint.h"
#include "train/loop.h"
#include "train/options.h"
#include "train/policy.h"
#include "util/error.h"

int main(int argc, char** argv) {
    using Stage = GPT_STAGE;
    try {
        const gpt::TrainOptions defaults = gpt::default_options(Stage::kIsGpu);
        bool help = false;
        gpt::TrainOptions opt = gpt::parse_options(argc, argv, defaults, help);
        if (help) {
            std::printf("%s", gpt::usage(argv[0], defaults,
                                         std::string("GPT-2 trainer, stage ") + Stage::name + ": " +
                                             Stage::description)
                                  .c_str());
            std::printf("\nthe ops this trainer runs, and the file each comes from:\n%s",
                        gpt::describe_policy<Stage>().c_str());
            return 0;
        }
        // --resume PATH alone continues the saved run: its options, then the command line's.
        if (!opt.resume.empty()) {
            const gpt::Checkpoint saved = gpt::load_checkpoint_header(opt.resume);
            if (saved.run.recorded) opt = gpt::resume_options(argc, argv, defaults, saved.run);
        }
        // How the user runs this trainer (./train sets it), for the commands it prints.
        const char* program = std::getenv("GPT_TRAIN_PROGRAM");
        opt.program = program && *program ? program : argv[0];
        Stage::configure(opt);
        if (!opt.prompt.empty()) return gpt::generate_text<Stage>(opt);
        if (!opt.eval_file.empty() && opt.eval_every == 0) return gpt::evaluate_only<Stage>(opt);
        return gpt::train<Stage>(opt);
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "error: out of host memory (try a smaller --batch or --model)\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
