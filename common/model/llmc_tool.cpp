// gpt_llmc: converts between this project's checkpoints and llm.c model files, the form in which
// llm.c distributes GPT-2's released weights (docs/formats.md, "llm.c model files"). The
// trainers read both kinds with --init; this tool is for going the other way, or for keeping a
// checkpoint of the weights.
#include <cstdio>
#include <string>

#include "model/checkpoint.h"
#include "model/llmc.h"
#include "util/cli.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

int main(int argc, char** argv) {
    std::string in, out, dtype;
    int padded_vocab = 0;  // 0: V rounded up to a multiple of 128
    try {
        const std::vector<gpt::cli::Option> options = {
            gpt::cli::required(gpt::cli::text("--in", "PATH", "a checkpoint or an llm.c model file", in)),
            gpt::cli::required(gpt::cli::text("--out", "PATH", "the file to write, of the other kind", out)),
            gpt::cli::whole("--padded-vocab", "VP",
                            "rows of wte in the llm.c file written (0: V rounded up to a multiple of 128, "
                            "50304 for GPT-2)",
                            padded_vocab, 0, 1 << 24),
            gpt::cli::text("--dtype", "TYPE",
                           "element type of the llm.c file written: fp32 (version 3) or bf16 (version 5, "
                           "rounded to nearest even); fp32 when not given",
                           dtype, gpt::cli::either("--dtype", "fp32", "bf16")),
        };
        if (gpt::cli::parse(argc, argv, options, false).help) {
            std::printf("usage: gpt_llmc --in PATH --out PATH [--padded-vocab VP] [--dtype fp32|bf16]\n\n"
                        "A checkpoint in: writes its parameters as an llm.c model file (optimizer and run state\n"
                        "are left out). An llm.c model file in: writes a checkpoint of its parameters (step 0,\n"
                        "the padded rows of wte dropped), as gpt_init would. See docs/formats.md.\n\n"
                        "options (default in brackets):\n%s",
                        gpt::cli::describe(options).c_str());
            return 0;
        }
        gpt::require_writable_path(out, "--out");
        const bool from_llmc = gpt::model_file_kind(in) == gpt::ModelFileKind::kLlmc;
        if (from_llmc && (padded_vocab > 0 || !dtype.empty()))
            throw gpt::Error("--padded-vocab and --dtype shape an llm.c file written from a checkpoint, but " + in +
                             " is an llm.c model file: a checkpoint is written from it");
        if (from_llmc) {
            gpt::LlmcFormat format;
            const gpt::Checkpoint ck = gpt::load_llmc_model(in, &format);
            gpt::save_checkpoint(out, ck);
            std::printf("wrote %s: checkpoint of %s, %s parameters, from llm.c model file version %d (%s), Vp %d\n",
                        out.c_str(), ck.config.describe().c_str(),
                        gpt::with_commas(int64_t(ck.params.size())).c_str(), format.version,
                        format.version == gpt::kLlmcVersionBf16 ? "bf16" : "fp32", format.padded_vocab);
        } else {
            const gpt::Checkpoint ck = gpt::load_checkpoint(in);
            const int vp = padded_vocab > 0 ? padded_vocab : ck.config.padded_vocab(128);
            const bool bf16 = dtype == "bf16";
            const int version = bf16 ? gpt::kLlmcVersionBf16 : gpt::kLlmcVersionFp32;
            gpt::save_llmc_model(out, ck.config, ck.params, vp, version);
            std::printf("wrote %s: llm.c model file version %d (%s), %s, Vp %d, %s parameters\n", out.c_str(),
                        version, bf16 ? "bf16" : "fp32", ck.config.describe().c_str(), vp,
                        gpt::with_commas(int64_t(ck.params.size())).c_str());
        }
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
