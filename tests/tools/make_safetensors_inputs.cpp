// Writes the C++ side's inputs of the safetensors check against an independent reader
// (tests/reference/safetensors_reference.py, test_safetensors_reference.cpp), into OUT_DIR:
//
//   exported.ckpt    a model with random, non-uniform parameters, as this project saves it
//   exported/        the same model as gpt::save_hf_gpt2 exports it (fp32, no tokenizer)
//   tokens.json      {"batch": B, "seq": T, "file": "tokens.bin", "seed": "..."}
//   tokens.bin       B*T int32 little-endian token ids, row by row
//   cpp_logits.bin   this project's CPU model's logits on them, float32, B*T*V (for the optional
//                    transformers check, tests/reference/check_hf_export.py)
//
// The sizes are odd on purpose: V = 997 (prime; not GPT-2's), C = 48 with 3 heads of 16, so that
// n_head cannot be guessed from C / 64 and must come from config.json. The parameters are drawn
// fresh each run from the test seed (GPT_TEST_SEED=<n> repeats a run); tokens.json passes the seed
// on to the Python side.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/reference_stage.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "testing/compare.h"
#include "train/gpt.h"
#include "util/error.h"
#include "util/rng.h"

namespace {

constexpr int kBatch = 2, kSeq = 24;  // kSeq = maxT: every row of wpe is used

gpt::GPTConfig model_config() {
    gpt::GPTConfig c;
    c.n_layer = 2;
    c.n_head = 3;
    c.n_embd = 48;
    c.max_seq_len = kSeq;
    c.vocab_size = 997;
    return c;
}

// Every tensor random: LayerNorm weights around 1, biases and embeddings around 0, matrices at
// 1/sqrt(fan-in); random_normal's scale drifts along each tensor, so no two rows look alike and a
// tensor read from the wrong place or in the wrong orientation changes the logits.
std::vector<float> random_parameters(const gpt::GPTConfig& c, gpt::Rng& rng) {
    const gpt::ParamLayout layout(c);
    std::vector<float> params(layout.total());
    for (int t = 0; t < gpt::kNumParamTensors; ++t) {
        float scale = 0.1f, offset = 0.0f;
        if (t == gpt::kLn1W || t == gpt::kLn2W || t == gpt::kLnfW) scale = 0.2f, offset = 1.0f;
        if (t == gpt::kQkvW || t == gpt::kAttProjW || t == gpt::kFcW) scale = 1.0f / std::sqrt(float(c.n_embd));
        if (t == gpt::kFcProjW) scale = 1.0f / std::sqrt(float(4 * c.n_embd));
        const std::vector<float> v = gpt::test::random_normal(rng, layout.size[t], scale, offset);
        std::copy(v.begin(), v.end(), params.begin() + layout.offset[t]);
    }
    return params;
}

template <class T>
void write_raw(const std::string& path, const std::vector<T>& values) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(T)));
    if (!out) throw gpt::Error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
        return 2;
    }
    try {
        const std::string dir = argv[1];
        std::filesystem::create_directories(dir);
        const uint64_t seed = gpt::test::test_seed();
        gpt::Rng rng(seed);

        gpt::Checkpoint ck;
        ck.config = model_config();
        ck.params = random_parameters(ck.config, rng);
        gpt::save_checkpoint(dir + "/exported.ckpt", ck);
        gpt::save_hf_gpt2(dir + "/exported", ck.config, ck.params, gpt::HfDtype::kF32, "" /* no tokenizer */);

        const std::vector<int> tokens = gpt::test::random_tokens(rng, size_t(kBatch) * kSeq, ck.config.vocab_size);
        const std::vector<int32_t> ids(tokens.begin(), tokens.end());  // the file's int32, whatever int is
        write_raw(dir + "/tokens.bin", ids);
        {
            std::ofstream json(dir + "/tokens.json");
            // The seed as a string: a JSON number is a double, which holds 53 of its 64 bits.
            json << "{\"batch\": " << kBatch << ", \"seq\": " << kSeq << ", \"file\": \"tokens.bin\", \"seed\": \""
                 << seed << "\"}\n";
            if (!json) throw gpt::Error("cannot write " + dir + "/tokens.json");
        }

        gpt::GPT<gpt::CpuReference> model(ck.config, kBatch, kSeq);
        model.set_parameters(ck.params);
        model.forward(tokens.data(), nullptr, kBatch, kSeq);
        std::vector<float> logits;
        for (int b = 0; b < kBatch; ++b)
            for (int t = 0; t < kSeq; ++t) {
                const std::vector<float> row = model.logits_at(b, t);
                logits.insert(logits.end(), row.begin(), row.end());
            }
        write_raw(dir + "/cpp_logits.bin", logits);

        std::printf("wrote %s/exported.ckpt and %s/exported/ (%s, seed %llu), tokens.bin (%d x %d) and "
                    "cpp_logits.bin\n",
                    dir.c_str(), dir.c_str(), ck.config.describe().c_str(), static_cast<unsigned long long>(seed),
                    kBatch, kSeq);
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
