// Makes the corpus folder of each fuzz target, OUT_DIR/<target>/, and writes seeds in the
// current file formats there with the project's own writers: a token shard, checkpoints of a
// tiny model with and without optimizer state, llm.c model files of a tiny model (fp32 and
// bf16, a few kilobytes: a micro model's would be 13 MB), and safetensors files: a tiny GPT-2 as
// save_hf_gpt2 writes it (F32 and BF16, with its config.json in front as fuzz_safetensors.cpp
// reads it), the same without config.json (then n_head = C / 64, so that one is of C = 64, 100 KB),
// GPT2Model keys with the tensors the loader ignores, and a file of other shapes.
// The committed seeds (tests/fuzz/corpus) stay valid inputs after a format changes, but only
// these reach past the version check of the new one. Those of safetensors/ are small (under 5 KB):
//   gpt2_bf16.safetensors    current_gpt2_bf16 of this tool (config.json in front)
//   gpt2model.safetensors    current_gpt2model of this tool (config.json in front)
//   generic.safetensors      current_generic of this tool: a scalar, an empty tensor, __metadata__
//   gpt2_f16.safetensors     current_gpt2_f32 with its tensors as F16, which the project reads but
//                            does not write (converted with Python's struct, format "e")
//   truncated.safetensors    the model file of gpt2_bf16.safetensors, cut in the middle of its data
//   nested.safetensors       a shape of arrays nested 100 deep (the JSON reader stops at 64)
//   overlap.safetensors      two tensors whose data_offsets overlap
//   metadata.safetensors     a __metadata__ value that is nested JSON, not a string
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw gpt::Error("cannot write " + path.string());
}

// A GPT-2 as save_hf_gpt2 writes it, in the input format of fuzz_safetensors.cpp: with its
// config.json in front, or the model file alone.
std::string hf_seed(const fs::path& scratch, const gpt::GPTConfig& config, gpt::HfDtype dtype, bool with_config) {
    const fs::path dir = scratch / "hf";
    gpt::save_hf_gpt2(dir.string(), config, gpt::init_parameters(config, 3), dtype, "");
    std::string seed = with_config ? "config.json\n" + read_bytes(dir / "config.json") + '\0' : "";
    seed += read_bytes(dir / "model.safetensors");
    fs::remove_all(dir);
    return seed;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    try {
        const fs::path out = argv[1];
        for (const char* target : {"json", "shard", "checkpoint", "llmc", "safetensors", "tokenizer"})
            fs::create_directories(out / target);
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

        // save_hf_gpt2 writes a directory: it is put together outside the corpus folders, which
        // libFuzzer reads with their subfolders.
        const fs::path st = out / "safetensors", scratch = out / "safetensors_scratch";
        fs::create_directories(st);
        const gpt::GPTConfig small{4, 16, 1, 2, 8};  // 1,048 parameters
        write_bytes(st / "current_gpt2_f32", hf_seed(scratch, small, gpt::HfDtype::kF32, true));
        write_bytes(st / "current_gpt2_bf16", hf_seed(scratch, small, gpt::HfDtype::kBF16, true));
        const gpt::GPTConfig wide{1, 1, 1, 1, 64};  // C = 64: loads without config.json
        write_bytes(st / "current_gpt2_no_config", hf_seed(scratch, wide, gpt::HfDtype::kBF16, false));

        // GPT2Model's keys (no "transformer."), as GPT-2's released file has them, with what the
        // loader ignores: the causal-mask buffers, a tied lm_head.weight and an unknown key (BF16).
        gpt::save_hf_gpt2((scratch / "hf").string(), small, gpt::init_parameters(small, 4), gpt::HfDtype::kF32, "");
        const gpt::SafetensorsFile hf = gpt::read_safetensors_header((scratch / "hf" / "model.safetensors").string());
        std::map<std::string, std::vector<float>> values;
        std::vector<gpt::SafetensorsOutput> tensors;
        for (const gpt::SafetensorsTensor& t : hf.tensors) {
            const std::string name = t.name.substr(t.name.find('.') + 1);
            values[name] = gpt::read_safetensors_floats(hf, t);
            tensors.push_back({name, t.shape, values[name].data()});
            if (name == "wte.weight") {
                values["lm_head.weight"] = values[name];
                tensors.push_back({"lm_head.weight", t.shape, values["lm_head.weight"].data()});
            }
        }
        auto& mask = values["h.0.attn.bias"];
        for (int i = 0; i < small.max_seq_len; ++i)
            for (int j = 0; j < small.max_seq_len; ++j) mask.push_back(j <= i ? 1.0f : 0.0f);
        const uint64_t T = small.max_seq_len;
        tensors.push_back({"h.0.attn.bias", {1, 1, T, T}, mask.data()});
        values["h.0.attn.masked_bias"] = {-1e4f};
        tensors.push_back({"h.0.attn.masked_bias", {}, values["h.0.attn.masked_bias"].data()});
        values["score.weight"] = {0.5f, -0.5f};
        tensors.push_back({"score.weight", {1, 2}, values["score.weight"].data()});
        gpt::save_safetensors((scratch / "gpt2model.safetensors").string(), tensors, {{"format", "pt"}}, true);
        write_bytes(st / "current_gpt2model", "config.json\n" + read_bytes(scratch / "hf" / "config.json") + '\0' +
                                                 read_bytes(scratch / "gpt2model.safetensors"));

        // Besides GPT-2: a scalar, an empty tensor (its offsets [k, k]) and metadata.
        const std::vector<float> six = {1.0f, -2.5f, 3.0e-8f, 65504.0f, -0.0f, 1.0f / 3};
        gpt::save_safetensors(
            (st / "current_generic").string(),
            {{"scalar", {}, six.data()}, {"empty", {0, 3}, six.data()}, {"matrix", {2, 3}, six.data()}},
            {{"format", "pt"}, {"note", "seed"}}, false);
        gpt::save_safetensors((st / "current_generic_bf16").string(), {{"vector", {6}, six.data()}}, {}, true);
        fs::remove_all(scratch);
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
