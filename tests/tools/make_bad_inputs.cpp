// Writes the bad inputs of the bad-input tests (tests/cpu/CMakeLists.txt) into OUT_DIR: data
// directories with one defect each, and broken checkpoints. Each test runs a tool on one of them
// and expects a one-line error naming the file and a non-zero exit.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "data/shard.h"
#include "model/checkpoint.h"
#include "model/llmc.h"
#include "model/safetensors.h"
#include "model/params.h"
#include "util/error.h"
#include "util/fnv.h"
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

// Sets header word `word` of a checkpoint and writes the hash the file then needs, so that the
// loader gets past the checksum to the rule the file breaks.
void poke_and_rehash(const fs::path& file, std::streamoff at, const void* bytes, size_t n) {
    std::vector<char> data(fs::file_size(file));
    std::ifstream(file, std::ios::binary).read(data.data(), static_cast<std::streamsize>(data.size()));
    std::memcpy(data.data() + at, bytes, n);
    std::memset(data.data() + 40, 0, 4);  // header word 10, the hash, counts as 0
    const uint32_t hash = gpt::fnv1a(data.data(), data.size());
    std::memcpy(data.data() + 40, &hash, 4);
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
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
        good_data(out / "val_of_three_batches", 3 * 2 * 16 + 1);  // at B = 2, T = 16

        // Good data in three short train shards, for the resume test: at B = 2, T = 16 each
        // shard holds three steps, so a run of 8 steps crosses shards and wraps around.
        fs::create_directories(out / "three_shards");
        for (int i = 0; i < 3; ++i)
            gpt::write_shard((out / "three_shards" / ("d_train_00000" + std::to_string(i) + ".bin")).string(),
                             tokens(100, 10 + i));
        gpt::write_shard((out / "three_shards" / "d_val_000000.bin").string(), tokens(100, 20));

        // A short training shard among good ones: skipped with a warning, the run goes on.
        good_data(out / "short_shard");
        gpt::write_shard((out / "short_shard" / "d_train_000001.bin").string(), tokens(20, 4));

        // Text too short for shards that hold one batch at gpt_prepare's defaults.
        {
            std::ofstream f(out / "short.txt");
            for (int i = 0; i < 100; ++i) f << "Sentence " << i << " of a text that is far too short to train on.\n";
        }

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
        // Format rules (docs/formats.md): the hash covers the header; reserved words are zero;
        // parameters are finite.
        const fs::path step_flipped = out / "step_flipped.ckpt";
        gpt::save_checkpoint(step_flipped.string(), ck);
        poke(step_flipped, 4 * 7, 1000);
        const fs::path reserved = out / "reserved_word.ckpt";
        gpt::save_checkpoint(reserved.string(), ck);
        const int32_t one = 1;
        poke_and_rehash(reserved, 4 * 200, &one, 4);
        const fs::path nan_params = out / "nan_params.ckpt";
        gpt::save_checkpoint(nan_params.string(), ck);
        const float nan = std::nanf("");
        poke_and_rehash(nan_params, 1024 + 4 * 7, &nan, 4);

        // llm.c model files of a tiny model (the trainer reads them before the data): a valid one,
        // for --resume, and one broken rule each.
        const gpt::GPTConfig tiny{4, 16, 1, 1, 8};
        const std::vector<float> tiny_params = gpt::init_parameters(tiny, 1);
        gpt::save_llmc_model((out / "llmc.bin").string(), tiny, tiny_params, 32);
        const fs::path llmc_truncated = out / "llmc_truncated.bin";  // in the middle of wte
        gpt::save_llmc_model(llmc_truncated.string(), tiny, tiny_params, 32);
        fs::resize_file(llmc_truncated, 1024 + 4 * 8 * 8);
        const fs::path llmc_version = out / "llmc_version4.bin";
        gpt::save_llmc_model(llmc_version.string(), tiny, tiny_params, 32);
        poke(llmc_version, 4, 4);
        const fs::path llmc_nan = out / "llmc_nan.bin";  // element 5 of qkv_w, after 32 x 8 of wte and 4 x 8 of wpe
        gpt::save_llmc_model(llmc_nan.string(), tiny, tiny_params, 32, gpt::kLlmcVersionBf16);
        {
            const uint16_t bf16_nan = 0x7FC0u;
            std::fstream f(llmc_nan, std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(1024 + 2 * (32 * 8 + 4 * 8 + 8 + 8 + 5));
            f.write(reinterpret_cast<const char*>(&bf16_nan), sizeof(bf16_nan));
        }

        // Hugging Face files of the same tiny model (common/model/safetensors.h): offsets that
        // overlap, and a directory without ln_f's bias.
        {
            const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
            std::ofstream f(out / "overlap.safetensors", std::ios::binary);
            const uint64_t length = header.size();
            f.write(reinterpret_cast<const char*>(&length), 8);
            f << header << std::string(12, '\0');
        }
        gpt::save_hf_gpt2((out / "hf_missing_key").string(), tiny, tiny_params, gpt::HfDtype::kF32, "");
        {
            const gpt::SafetensorsFile file = gpt::read_safetensors_header((out / "hf_missing_key/model.safetensors").string());
            std::vector<std::vector<float>> values;
            std::vector<gpt::SafetensorsOutput> kept;
            for (const gpt::SafetensorsTensor& t : file.tensors) values.push_back(gpt::read_safetensors_floats(file, t));
            for (size_t i = 0; i < file.tensors.size(); ++i)
                if (file.tensors[i].name != "transformer.ln_f.bias")
                    kept.push_back({file.tensors[i].name, file.tensors[i].shape, values[i].data()});
            gpt::save_safetensors((out / "hf_missing_key/model.safetensors").string(), kept, {{"format", "pt"}}, false);
        }

        // A trainer's checkpoint of a run on `good` (B = 2, T = 16, seed 1337), and one with
        // optimizer state but no run to continue.
        gpt::Checkpoint run = ck;
        run.m.assign(ck.params.size(), 0.0f);
        run.v.assign(ck.params.size(), 0.0f);
        gpt::save_checkpoint((out / "no_run_state.ckpt").string(), run);
        run.step = 1;
        gpt::RunState& r = run.run;
        r.recorded = true;
        r.batch = 2, r.seq = 16, r.micro_batches = 1, r.world = 1, r.steps = 1, r.warmup = 0;
        r.lr = 1e-3f, r.min_lr_frac = 0.1f, r.weight_decay = 0.1f, r.beta1 = 0.9f, r.beta2 = 0.95f;
        r.eps = 1e-8f, r.grad_clip = 1.0f, r.seed = 1337, r.data_tokens = 20000;
        gpt::save_checkpoint((out / "run.ckpt").string(), run);
        gpt::save_checkpoint((out / "run_copy.ckpt").string(), run);  // a diverging run must leave it as it is

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
