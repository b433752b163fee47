#include "model/llmc.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/params.h"
#include "model/safetensors.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/file.h"

namespace gpt {

namespace {
constexpr int kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

// Header words (docs/formats.md, "llm.c model files"); llm.c leaves every word from
// kFirstZeroWord on at 0.
enum Word { kMagic = 0, kVersion = 1, kMaxT = 2, kVocab = 3, kLayers = 4, kHeads = 5, kEmbd = 6, kPadded = 7,
            kFirstZeroWord = 8 };

// Elements converted at a time: the bf16 buffer stays small whatever the model's size.
constexpr size_t kChunk = size_t(1) << 20;

uint64_t element_bytes(int version) { return version == kLlmcVersionBf16 ? 2 : 4; }
const char* element_name(int version) { return version == kLlmcVersionBf16 ? "bf16" : "fp32"; }

bool valid_version(int version) { return version == kLlmcVersionFp32 || version == kLlmcVersionBf16; }

}  // namespace

Checkpoint load_llmc_model(const std::string& path, LlmcFormat* format) {
    const std::string where = path + ": ";
    std::ifstream in = open_regular_file(path, "");
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) throw Error(where + "cannot read its size (" + ec.message() + ")");

    int32_t h[kHeaderInts] = {};
    in.read(reinterpret_cast<char*>(h), sizeof(h));
    const auto got = static_cast<size_t>(in.gcount());
    if (got < sizeof(int32_t))
        throw Error(where + "not an llm.c model file (" + std::to_string(got) + " bytes, shorter than its magic number)");
    if (h[kMagic] != kLlmcMagic)
        throw Error(where + "not an llm.c model file (magic " + std::to_string(h[kMagic]) + ", expected " +
                    std::to_string(kLlmcMagic) + ")");
    if (got < sizeof(h))
        throw Error(where + "truncated: a header of 1024 bytes expected, " + std::to_string(got) + " found");
    const int version = h[kVersion];
    if (!valid_version(version))
        throw Error(where + "llm.c model file of version " + std::to_string(version) +
                    " (expected 3 = fp32 or 5 = bf16 parameters)");

    Checkpoint c;
    c.config = GPTConfig{h[kMaxT], h[kVocab], h[kLayers], h[kHeads], h[kEmbd]};
    try {
        validate_config(c.config);  // bounds every size: the counts below cannot overflow
    } catch (const Error& e) {
        throw Error(where + e.what());
    }
    const int padded = h[kPadded];
    if (padded < c.config.vocab_size)
        throw Error(where + "padded vocabulary Vp " + std::to_string(padded) + " is smaller than V " +
                    std::to_string(c.config.vocab_size));
    for (int w = kFirstZeroWord; w < kHeaderInts; ++w)
        if (h[w] != 0)
            throw Error(where + "header word " + std::to_string(w) + " is " + std::to_string(h[w]) +
                        ", not 0 (llm.c model files use words 0 to 7 only)");

    // The size is checked before anything is allocated: a header cannot make us allocate more
    // than the file holds.
    const ParamLayout file_layout(c.config, padded);
    const uint64_t count = file_layout.total();
    const uint64_t expected = kHeaderBytes + count * element_bytes(version);
    if (size != expected) {
        const std::string sizes = "1024 + " + std::to_string(expected - kHeaderBytes) + " bytes expected, " +
                                  std::to_string(size) + " found";
        const int other = version == kLlmcVersionFp32 ? kLlmcVersionBf16 : kLlmcVersionFp32;
        if (size == kHeaderBytes + count * element_bytes(other))
            throw Error(where + "version " + std::to_string(version) + " (" + element_name(version) +
                        " parameters), but its size is that of " + element_name(other) + " parameters: " + sizes);
        throw Error(where + (size < expected ? "truncated: " : "trailing bytes: ") + sizes);
    }

    const ParamLayout layout(c.config);
    c.params.resize(layout.total());
    std::vector<uint16_t> halves(version == kLlmcVersionBf16 ? std::min(kChunk, c.params.size()) : 0);
    auto read = [&](float* dst, size_t n) {
        bool ok = true;
        if (version == kLlmcVersionFp32) {
            ok = bool(in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n * sizeof(float))));
        } else {
            for (size_t done = 0; ok && done < n; done += halves.size()) {
                const size_t m = std::min(halves.size(), n - done);
                ok = bool(in.read(reinterpret_cast<char*>(halves.data()), static_cast<std::streamsize>(m * 2)));
                for (size_t i = 0; ok && i < m; ++i) dst[done + i] = bf16_bits_to_float(halves[i]);
            }
        }
        if (!ok) throw Error(where + "read error (did the file change while it was read?)");
    };
    read(c.params.data(), layout.size[kWte]);
    // The padded rows are not part of the model: skipped, whatever they hold.
    const uint64_t padding = (file_layout.size[kWte] - layout.size[kWte]) * element_bytes(version);
    in.seekg(static_cast<std::streamoff>(padding), std::ios::cur);
    read(c.params.data() + layout.offset[kWpe], layout.total() - layout.offset[kWpe]);

    const std::string bad = first_non_finite(c.params, c.config, "parameter");
    if (!bad.empty()) throw Error(where + bad);
    if (format) *format = LlmcFormat{version, padded};
    return c;
}

void save_llmc_model(const std::string& path, const GPTConfig& config, const std::vector<float>& params,
                     int padded_vocab, int version) {
    const std::string where = "not saving llm.c model file " + path + ": ";
    try {
        validate_config(config);
    } catch (const Error& e) {
        throw Error(where + e.what());
    }
    if (!valid_version(version))
        throw Error(where + "version " + std::to_string(version) + " (3 = fp32 or 5 = bf16 parameters)");
    const ParamLayout layout(config);
    if (params.size() != layout.total())
        throw Error(where + std::to_string(params.size()) + " parameters, its config has " +
                    std::to_string(layout.total()));
    if (padded_vocab < config.vocab_size)
        throw Error(where + "padded vocabulary Vp " + std::to_string(padded_vocab) + " is smaller than V " +
                    std::to_string(config.vocab_size));
    const std::string bad = first_non_finite(params, config, "parameter");
    if (!bad.empty()) throw Error(where + bad);
    if (version == kLlmcVersionBf16)
        if (const std::string beyond = first_beyond_bf16(params, config, "parameter"); !beyond.empty())
            throw Error(where + beyond);

    int32_t h[kHeaderInts] = {};
    h[kMagic] = kLlmcMagic;
    h[kVersion] = version;
    h[kMaxT] = config.max_seq_len;
    h[kVocab] = config.vocab_size;
    h[kLayers] = config.n_layer;
    h[kHeads] = config.n_head;
    h[kEmbd] = config.n_embd;
    h[kPadded] = padded_vocab;

    InterruptibleFile file(path, "llm.c model file");
    file.write(h, sizeof(h));
    const size_t elem = element_bytes(version);
    std::vector<uint16_t> halves(version == kLlmcVersionBf16 ? kChunk : 0);
    auto write = [&](const float* src, size_t n) {
        if (version == kLlmcVersionFp32) {
            file.write(src, n * sizeof(float));
            return;
        }
        for (size_t done = 0; done < n; done += kChunk) {
            const size_t m = std::min(kChunk, n - done);
            for (size_t i = 0; i < m; ++i) halves[i] = float_to_bf16_bits(src[done + i]);
            file.write(halves.data(), m * elem);
        }
    };
    write(params.data(), layout.size[kWte]);
    size_t left = size_t(padded_vocab - config.vocab_size) * config.n_embd * elem;  // the padded rows
    const std::vector<char> zeros(std::min(left, kChunk * elem), 0);
    while (left > 0) {
        const size_t bytes = std::min(left, zeros.size());
        file.write(zeros.data(), bytes);
        left -= bytes;
    }
    write(params.data() + layout.offset[kWpe], layout.total() - layout.offset[kWpe]);
    file.commit();
}

ModelFileKind model_file_kind(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        if (!std::filesystem::exists(hf_model_file(path), ec))
            load_hf_gpt2(path);  // throws the error that says what the directory lacks
        return ModelFileKind::kSafetensors;
    }
    std::ifstream in = open_regular_file(path, "");
    unsigned char head[64] = {};
    in.read(reinterpret_cast<char*>(head), sizeof(head));
    const auto got = static_cast<size_t>(in.gcount());
    int32_t magic = 0;
    std::memcpy(&magic, head, sizeof(magic));
    if (got >= sizeof(magic) && magic == kCheckpointMagic) return ModelFileKind::kCheckpoint;
    if (got >= sizeof(magic) && magic == kLlmcMagic) return ModelFileKind::kLlmc;
    if (looks_like_safetensors(head, got)) return ModelFileKind::kSafetensors;
    throw Error(path + ": neither a checkpoint of this project (magic " + std::to_string(kCheckpointMagic) +
                "), an llm.c model file (magic " + std::to_string(kLlmcMagic) +
                ") nor a safetensors file (a header length, then '{')");
}

Checkpoint load_model_file(const std::string& path, std::vector<std::string>* notes) {
    switch (model_file_kind(path)) {
        case ModelFileKind::kCheckpoint: return load_checkpoint(path);
        case ModelFileKind::kLlmc: {
            LlmcFormat format;
            Checkpoint c = load_llmc_model(path, &format);
            if (notes)
                notes->push_back(path + ": llm.c model file version " + std::to_string(format.version) + " (" +
                                 element_name(format.version) + "), Vp " + std::to_string(format.padded_vocab) +
                                 (format.padded_vocab > c.config.vocab_size ? ", the padded rows dropped" : ""));
            return c;
        }
        case ModelFileKind::kSafetensors: {
            HfImport imported = load_hf_gpt2(path);
            if (notes) notes->insert(notes->end(), imported.notes.begin(), imported.notes.end());
            return std::move(imported.checkpoint);
        }
    }
    throw Error(path + ": unknown kind of model file");
}

}  // namespace gpt
