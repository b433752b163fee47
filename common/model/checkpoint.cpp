#include "model/checkpoint.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/llmc.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "util/error.h"
#include "util/file.h"
#include "util/fnv.h"

namespace gpt {

namespace {
constexpr int kHeaderInts = 256;
// Far above what a run's options take (a few hundred bytes), so that a corrupt word 41 cannot
// make the reader allocate gigabytes.
constexpr size_t kMaxOptionsBytes = size_t(1) << 20;
constexpr int kHashWord = 10;

// Header words (docs/formats.md, "Checkpoints"). Words from kReservedFrom on must be zero.
enum Word {
    kMagic = 0, kVersion = 1, kMaxT = 2, kVocab = 3, kLayers = 4, kHeads = 5, kEmbd = 6, kStep = 7,
    kHasOpt = 8, kCount = 9, kHash = kHashWord, kHasRun = 11, kBatch = 12, kSeq = 13, kMicro = 14,
    kWorld = 15, kSteps = 16, kWarmup = 17, kLr = 18, kMinLrFrac = 19, kWeightDecay = 20, kBeta1 = 21,
    kBeta2 = 22, kEps = 23, kGradClip = 24, kSeed = 25 /* 2 words */, kDataTokens = 27 /* 2 */,
    kDataShard = 29 /* 2 */, kDataPos = 31 /* 2 */, kSampleRng = 33 /* 8 */, kOptionsBytes = 41,
    kReservedFrom = 42
};

using Header = int32_t[kHeaderInts];

void put_float(Header h, int word, float v) { std::memcpy(&h[word], &v, sizeof(v)); }
float get_float(const Header h, int word) {
    float v;
    std::memcpy(&v, &h[word], sizeof(v));
    return v;
}
void put_u64(Header h, int word, uint64_t v) { std::memcpy(&h[word], &v, sizeof(v)); }
uint64_t get_u64(const Header h, int word) {
    uint64_t v;
    std::memcpy(&v, &h[word], sizeof(v));
    return v;
}

// The run's options after the header: "--name" NUL value NUL, pair after pair. NUL cannot be in
// a command-line argument, so any path or text comes back as it was given.
std::string options_section(const RunState& r) {
    std::string out;
    for (const auto& [name, value] : r.options) {
        out += name;
        out += '\0';
        out += value;
        out += '\0';
    }
    return out;
}

std::vector<std::pair<std::string, std::string>> parse_options_section(const std::string& bytes,
                                                                     const std::string& where) {
    std::vector<std::string> parts;
    size_t from = 0;
    while (from < bytes.size()) {
        const size_t nul = bytes.find('\0', from);
        if (nul == std::string::npos) throw Error(where + "the run's options do not end with a NUL byte");
        parts.push_back(bytes.substr(from, nul - from));
        from = nul + 1;
    }
    if (parts.size() % 2 != 0) throw Error(where + "the run's options hold a name without a value");
    std::vector<std::pair<std::string, std::string>> options;
    for (size_t i = 0; i < parts.size(); i += 2) {
        if (parts[i].size() < 3 || parts[i].compare(0, 2, "--") != 0)
            throw Error(where + "the run's options hold '" + parts[i] + "', not an option name");
        options.emplace_back(parts[i], parts[i + 1]);
    }
    return options;
}

// FNV-1a over the header (its hash word taken as 0), the run's options and then the payload, so
// that a flipped bit anywhere in the file, the step count included, is found.
uint32_t file_hash(const Header header, const std::string& options, const Checkpoint& c) {
    Header h;
    std::memcpy(h, header, sizeof(h));
    h[kHash] = 0;
    uint32_t hash = fnv1a(h, sizeof(h));
    hash = fnv1a(options.data(), options.size(), hash);
    hash = fnv1a(c.params.data(), c.params.size() * sizeof(float), hash);
    hash = fnv1a(c.m.data(), c.m.size() * sizeof(float), hash);
    return fnv1a(c.v.data(), c.v.size() * sizeof(float), hash);
}

void fill_header(Header h, const Checkpoint& c, size_t n, size_t options_bytes) {
    std::memset(h, 0, sizeof(Header));
    h[kMagic] = kCheckpointMagic;
    h[kVersion] = kCheckpointVersion;
    h[kMaxT] = c.config.max_seq_len;
    h[kVocab] = c.config.vocab_size;
    h[kLayers] = c.config.n_layer;
    h[kHeads] = c.config.n_head;
    h[kEmbd] = c.config.n_embd;
    h[kStep] = c.step;
    h[kHasOpt] = c.m.empty() ? 0 : 1;
    h[kCount] = static_cast<int32_t>(n);
    const RunState& r = c.run;
    if (!r.recorded) return;
    h[kHasRun] = 1;
    h[kBatch] = r.batch;
    h[kSeq] = r.seq;
    h[kMicro] = r.micro_batches;
    h[kWorld] = r.world;
    h[kSteps] = r.steps;
    h[kWarmup] = r.warmup;
    put_float(h, kLr, r.lr);
    put_float(h, kMinLrFrac, r.min_lr_frac);
    put_float(h, kWeightDecay, r.weight_decay);
    put_float(h, kBeta1, r.beta1);
    put_float(h, kBeta2, r.beta2);
    put_float(h, kEps, r.eps);
    put_float(h, kGradClip, r.grad_clip);
    put_u64(h, kSeed, r.seed);
    put_u64(h, kDataTokens, static_cast<uint64_t>(r.data_tokens));
    put_u64(h, kDataShard, static_cast<uint64_t>(r.data_shard));
    put_u64(h, kDataPos, static_cast<uint64_t>(r.data_pos));
    for (int i = 0; i < 4; ++i) put_u64(h, kSampleRng + 2 * i, r.sample_rng[i]);
    h[kOptionsBytes] = static_cast<int32_t>(options_bytes);
}

}  // namespace

std::function<void()>& checkpoint_save_progress_hook() {
    static std::function<void()> hook;
    return hook;
}

void save_checkpoint(const std::string& path, const Checkpoint& c) {
    validate_config(c.config);
    const size_t n = ParamLayout(c.config).total();
    if (c.params.size() != n) throw Error("checkpoint " + path + ": parameter count does not match the config");
    const bool has_opt = !c.m.empty();
    if (has_opt && (c.m.size() != n || c.v.size() != n))
        throw Error("checkpoint " + path + ": optimizer state size does not match the parameters");
    for (const auto& [values, what] : {std::pair{&c.params, "parameter"}, {&c.m, "AdamW moment m"},
                                       {&c.v, "AdamW moment v"}}) {
        const std::string bad = first_non_finite(*values, c.config, what);
        if (!bad.empty()) throw Error("not saving checkpoint " + path + ": " + bad);
    }
    const std::string options = c.run.recorded ? options_section(c.run) : "";
    if (options.size() > kMaxOptionsBytes)
        throw Error("not saving checkpoint " + path + ": the run's options take " + std::to_string(options.size()) +
                    " bytes, more than " + std::to_string(kMaxOptionsBytes));
    Header header;
    fill_header(header, c, n, options.size());
    header[kHash] = static_cast<int32_t>(file_hash(header, options, c));

    // PATH.tmp, renamed over PATH only when whole; SIGINT or SIGTERM during the save ends it
    // there, and the previous checkpoint stays (util/file.h).
    InterruptibleFile file(path, "checkpoint", checkpoint_save_progress_hook());
    file.write(header, sizeof(header));
    file.write(options.data(), options.size());
    file.write(c.params.data(), n * sizeof(float));
    if (has_opt) {
        file.write(c.m.data(), n * sizeof(float));
        file.write(c.v.data(), n * sizeof(float));
    }
    file.commit();
}

namespace {

// Reads and checks the header and the run's options, leaving `in` at the payload; returns the
// checkpoint without its floats, and the options' bytes and the header for the hash.
Checkpoint read_header(std::ifstream& in, const std::string& path, Header& header, std::string& options) {
    const std::string where = "checkpoint " + path + ": ";
    const bool whole = bool(in.read(reinterpret_cast<char*>(header), sizeof(Header)));
    const auto got = static_cast<size_t>(in.gcount());
    // A run cannot continue from weights alone.
    if (got >= 4 && header[kMagic] == kLlmcMagic)
        throw Error(where + "an llm.c model file (magic " + std::to_string(kLlmcMagic) +
                    "), not a checkpoint of this project: it holds parameters only; start from it with --init");
    if (looks_like_safetensors(reinterpret_cast<const unsigned char*>(header), got) && header[kMagic] != kCheckpointMagic)
        throw Error(where + "a safetensors file, not a checkpoint of this project: it holds parameters only; "
                            "start from it with --init");
    if (!whole) throw Error(where + "truncated header");
    if (header[kMagic] != kCheckpointMagic)
        throw Error(where + "bad magic " + std::to_string(header[kMagic]) + " (not a checkpoint)");
    const int version = header[kVersion];
    if (version != kCheckpointVersion && version != 2)
        throw Error(where + "unsupported version " + std::to_string(version) + " (this build reads 2 and " +
                    std::to_string(kCheckpointVersion) + ")");

    Checkpoint c;
    c.config.max_seq_len = header[kMaxT];
    c.config.vocab_size = header[kVocab];
    c.config.n_layer = header[kLayers];
    c.config.n_head = header[kHeads];
    c.config.n_embd = header[kEmbd];
    try {
        validate_config(c.config);
    } catch (const Error& e) {
        throw Error(where + e.what());
    }
    c.step = header[kStep];
    if (c.step < 0) throw Error(where + "negative step count " + std::to_string(c.step));
    if (header[kHasOpt] != 0 && header[kHasOpt] != 1)
        throw Error(where + "header word 8 (optimizer state follows) is " + std::to_string(header[kHasOpt]) +
                    ", not 0 or 1");
    if (header[kHasRun] != 0 && header[kHasRun] != 1)
        throw Error(where + "header word 11 (run state recorded) is " + std::to_string(header[kHasRun]) +
                    ", not 0 or 1");
    const size_t n = ParamLayout(c.config).total();
    if (header[kCount] != static_cast<int32_t>(n))
        throw Error(where + "parameter count " + std::to_string(header[kCount]) + " does not match its config (" +
                    std::to_string(n) + ")");
    // Version 2 had no options: its word 41 was reserved.
    for (int w = version == 2 ? kOptionsBytes : kReservedFrom; w < kHeaderInts; ++w)
        if (header[w] != 0) throw Error(where + "reserved header word " + std::to_string(w) + " is not zero");
    if (header[kHasRun] == 0)
        for (int w = kHasRun + 1; w < kReservedFrom; ++w)
            if (header[w] != 0)
                throw Error(where + "header word " + std::to_string(w) + " is set but no run state is recorded");
    const int32_t options_bytes = header[kOptionsBytes];
    if (options_bytes < 0 || size_t(options_bytes) > kMaxOptionsBytes)
        throw Error(where + "header word 41 (bytes of the run's options) is " + std::to_string(options_bytes) +
                    ", not within 0 ... " + std::to_string(kMaxOptionsBytes));

    const bool has_opt = header[kHasOpt] == 1;
    const uintmax_t expected = sizeof(Header) + uintmax_t(options_bytes) + n * sizeof(float) * (has_opt ? 3 : 1);
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec || size != expected)
        throw Error(where + "size " + std::to_string(size) + " bytes, expected " + std::to_string(expected) +
                    " (truncated or corrupt)");
    options.assign(size_t(options_bytes), '\0');
    if (!in.read(options.data(), options_bytes)) throw Error(where + "truncated");

    RunState& r = c.run;
    r.recorded = header[kHasRun] == 1;
    if (r.recorded) {
        r.batch = header[kBatch];
        r.seq = header[kSeq];
        r.micro_batches = header[kMicro];
        r.world = header[kWorld];
        r.steps = header[kSteps];
        r.warmup = header[kWarmup];
        r.lr = get_float(header, kLr);
        r.min_lr_frac = get_float(header, kMinLrFrac);
        r.weight_decay = get_float(header, kWeightDecay);
        r.beta1 = get_float(header, kBeta1);
        r.beta2 = get_float(header, kBeta2);
        r.eps = get_float(header, kEps);
        r.grad_clip = get_float(header, kGradClip);
        r.seed = get_u64(header, kSeed);
        r.data_tokens = static_cast<int64_t>(get_u64(header, kDataTokens));
        r.data_shard = static_cast<int64_t>(get_u64(header, kDataShard));
        r.data_pos = static_cast<int64_t>(get_u64(header, kDataPos));
        for (int i = 0; i < 4; ++i) r.sample_rng[i] = get_u64(header, kSampleRng + 2 * i);
        if (r.batch < 1 || r.seq < 1 || r.micro_batches < 1 || r.world < 1 || r.steps < 1 || r.warmup < 0 ||
            r.data_tokens < 1 || r.data_shard < 0 || r.data_pos < 0)
            throw Error(where + "run state out of range (batch, seq, micro-batches, processes and steps must be "
                                "positive; warmup and data position not negative)");
        r.options = parse_options_section(options, where);
    }
    return c;
}

}  // namespace

Checkpoint load_checkpoint_header(const std::string& path) {
    std::ifstream in = open_regular_file(path, "checkpoint");
    Header header;
    std::string options;
    return read_header(in, path, header, options);
}

uint64_t checkpoint_file_bytes(const GPTConfig& config, bool optimizer_state, const RunState& run) {
    const uint64_t n = ParamLayout(config).total();
    return sizeof(Header) + (run.recorded ? options_section(run).size() : 0) +
           n * sizeof(float) * (optimizer_state ? 3 : 1);
}

Checkpoint load_checkpoint(const std::string& path) {
    const std::string where = "checkpoint " + path + ": ";
    std::ifstream in = open_regular_file(path, "checkpoint");
    Header header;
    std::string options;
    Checkpoint c = read_header(in, path, header, options);
    const size_t n = ParamLayout(c.config).total();
    auto read_floats = [&](std::vector<float>& dst) {
        dst.resize(n);
        if (!in.read(reinterpret_cast<char*>(dst.data()), n * sizeof(float))) throw Error(where + "truncated");
    };
    read_floats(c.params);
    if (header[kHasOpt] == 1) {
        read_floats(c.m);
        read_floats(c.v);
    }
    if (file_hash(header, options, c) != static_cast<uint32_t>(header[kHash]))
        throw Error(where + "checksum mismatch (corrupt)");
    for (const auto& [values, what] : {std::pair{&c.params, "parameter"}, {&c.m, "AdamW moment m"},
                                       {&c.v, "AdamW moment v"}}) {
        const std::string bad = first_non_finite(*values, c.config, what);
        if (!bad.empty()) throw Error(where + bad);
    }
    return c;
}

}  // namespace gpt
