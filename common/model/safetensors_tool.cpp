// gpt_safetensors: converts between this project's model files and GPT-2 in Hugging Face's layout
// (docs/formats.md, "Hugging Face safetensors"), the form in which transformers, chat front ends
// and other tools take a model. The trainers read Hugging Face files with --init; this tool is for
// going the other way, or for keeping a checkpoint of the weights.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/safetensors.h"
#include "util/cli.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

int main(int argc, char** argv) {
    std::string in, out, dtype, tokenizer = GPT_DATA_DIR "/gpt2";
    try {
        const std::vector<gpt::cli::Option> options = {
            gpt::cli::required(gpt::cli::text(
                "--in", "PATH",
                "a checkpoint or an llm.c model file; or a model.safetensors or the directory that holds it", in)),
            gpt::cli::required(gpt::cli::text(
                "--out", "PATH", "the directory to write (from a checkpoint or llm.c file), else the checkpoint", out)),
            gpt::cli::text("--dtype", "TYPE",
                           "element type of the model.safetensors written: fp32 (F32) or bf16 (BF16, rounded to "
                           "nearest even); fp32 when not given",
                           dtype, gpt::cli::either("--dtype", "fp32", "bf16")),
            gpt::cli::text("--tokenizer", "DIR",
                           "GPT-2 tokenizer files (encoder.json, vocab.bpe) copied as vocab.json and merges.txt; "
                           "'none' writes no tokenizer files",
                           tokenizer),
        };
        if (gpt::cli::parse(argc, argv, options, false).help) {
            std::printf("usage: gpt_safetensors --in PATH --out PATH [--dtype fp32|bf16] [--tokenizer DIR|none]\n\n"
                        "A checkpoint or an llm.c model file in: writes the directory --out as transformers'\n"
                        "from_pretrained reads it: model.safetensors, config.json, generation_config.json, and the\n"
                        "tokenizer's vocab.json, merges.txt and tokenizer_config.json (optimizer and run state are\n"
                        "left out; an llm.c file's padded rows too). A Hugging Face GPT-2 in (model.safetensors, or\n"
                        "its directory): writes a checkpoint of its parameters (step 0), as gpt_init would.\n"
                        "See docs/formats.md.\n\n"
                        "options (default in brackets):\n%s",
                        gpt::cli::describe(options).c_str());
            return 0;
        }
        const gpt::ModelFileKind kind = gpt::model_file_kind(in);
        if (kind == gpt::ModelFileKind::kSafetensors) {
            if (!dtype.empty())
                throw gpt::Error("--dtype shapes a model.safetensors written from a checkpoint, but " + in +
                                 " is a safetensors file: a checkpoint is written from it");
            gpt::require_writable_path(out, "--out");
            const gpt::HfImport imported = gpt::load_hf_gpt2(in);
            for (const std::string& note : imported.notes) std::printf("read       %s\n", note.c_str());
            gpt::save_checkpoint(out, imported.checkpoint);
            std::printf("wrote %s: checkpoint of %s, %s parameters\n", out.c_str(),
                        imported.checkpoint.config.describe().c_str(),
                        gpt::with_commas(int64_t(imported.checkpoint.params.size())).c_str());
            return 0;
        }
        std::vector<std::string> notes;
        const gpt::Checkpoint ck = gpt::load_model_file(in, &notes);
        for (const std::string& note : notes) std::printf("read       %s\n", note.c_str());
        const bool bf16 = dtype == "bf16";
        std::vector<std::string> written;
        try {
            gpt::save_hf_gpt2(out, ck.config, ck.params, bf16 ? gpt::HfDtype::kBF16 : gpt::HfDtype::kF32,
                              tokenizer == "none" ? "" : tokenizer, &written);
        } catch (const gpt::MissingFile& e) {
            throw gpt::Error(std::string(e.what()) + "; the GPT-2 tokenizer is installed with the default corpus "
                             "(cmake --build build/cpu --target data), or give --tokenizer DIR, or --tokenizer none");
        }
        std::string files;
        for (const std::string& name : written) files += (files.empty() ? "" : ", ") + name;
        // transformers' fast tokenizer reads tokenizer.json before vocab.json and merges.txt: one
        // left from an earlier model in the same directory would win over what was just written.
        const std::string stale = out + "/tokenizer.json";
        std::error_code ec;
        if (std::filesystem::exists(stale, ec))
            std::printf("note: %s was already there and is left as it is; GPT2TokenizerFast reads it before "
                        "vocab.json and merges.txt: remove it unless it is this model's tokenizer\n", stale.c_str());
        std::printf("wrote %s: GPT-2 in the Hugging Face layout (%s), %s, %s parameters: %s\n", out.c_str(),
                    bf16 ? "BF16" : "F32", ck.config.describe().c_str(),
                    gpt::with_commas(int64_t(ck.params.size())).c_str(), files.c_str());
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
