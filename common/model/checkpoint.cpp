#include "model/checkpoint.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/params.h"
#include "util/error.h"
#include "util/file.h"
#include "util/fnv.h"

namespace gpt {

namespace {
constexpr int kHeaderInts = 256;

uint32_t payload_hash(const Checkpoint& c) {
    uint32_t h = fnv1a(c.params.data(), c.params.size() * sizeof(float));
    h = fnv1a(c.m.data(), c.m.size() * sizeof(float), h);
    return fnv1a(c.v.data(), c.v.size() * sizeof(float), h);
}
}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
    validate_config(c.config);
    const size_t n = ParamLayout(c.config).total();
    if (c.params.size() != n) throw Error("checkpoint " + path + ": parameter count does not match the config");
    const bool has_opt = !c.m.empty();
    if (has_opt && (c.m.size() != n || c.v.size() != n))
        throw Error("checkpoint " + path + ": optimizer state size does not match the parameters");

    int32_t header[kHeaderInts] = {};
    header[0] = kCheckpointMagic;
    header[1] = kCheckpointVersion;
    header[2] = c.config.max_seq_len;
    header[3] = c.config.vocab_size;
    header[4] = c.config.n_layer;
    header[5] = c.config.n_head;
    header[6] = c.config.n_embd;
    header[7] = c.step;
    header[8] = has_opt ? 1 : 0;
    header[9] = static_cast<int32_t>(n);
    const uint32_t hash = payload_hash(c);
    std::memcpy(&header[10], &hash, sizeof(hash));

    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw Error("cannot write checkpoint " + tmp);
        out.write(reinterpret_cast<const char*>(header), sizeof(header));
        out.write(reinterpret_cast<const char*>(c.params.data()), n * sizeof(float));
        if (has_opt) {
            out.write(reinterpret_cast<const char*>(c.m.data()), n * sizeof(float));
            out.write(reinterpret_cast<const char*>(c.v.data()), n * sizeof(float));
        }
        out.flush();
        if (!out) throw Error("cannot write checkpoint " + tmp + " (disk full?)");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw Error("cannot rename " + tmp + " to " + path + ": " + ec.message());
}

Checkpoint load_checkpoint(const std::string& path) {
    std::ifstream in = open_regular_file(path, "checkpoint");
    int32_t header[kHeaderInts];
    if (!in.read(reinterpret_cast<char*>(header), sizeof(header)))
        throw Error("checkpoint " + path + ": truncated header");
    if (header[0] != kCheckpointMagic)
        throw Error("checkpoint " + path + ": bad magic " + std::to_string(header[0]) + " (not a checkpoint)");
    if (header[1] != kCheckpointVersion)
        throw Error("checkpoint " + path + ": unsupported version " + std::to_string(header[1]));

    Checkpoint c;
    c.config.max_seq_len = header[2];
    c.config.vocab_size = header[3];
    c.config.n_layer = header[4];
    c.config.n_head = header[5];
    c.config.n_embd = header[6];
    try {
        validate_config(c.config);
    } catch (const Error& e) {
        throw Error("checkpoint " + path + ": " + e.what());
    }
    c.step = header[7];
    const bool has_opt = header[8] == 1;
    const size_t n = ParamLayout(c.config).total();
    if (header[9] != static_cast<int32_t>(n) || c.step < 0 || (header[8] != 0 && header[8] != 1))
        throw Error("checkpoint " + path + ": header does not match its own config (corrupt)");

    const uintmax_t expected = sizeof(header) + n * sizeof(float) * (has_opt ? 3 : 1);
    std::error_code ec;
    const uintmax_t actual = std::filesystem::file_size(path, ec);
    if (ec || actual != expected)
        throw Error("checkpoint " + path + ": size " + std::to_string(actual) + " bytes, expected " +
                    std::to_string(expected) + " (truncated or corrupt)");

    auto read_floats = [&](std::vector<float>& dst) {
        dst.resize(n);
        if (!in.read(reinterpret_cast<char*>(dst.data()), n * sizeof(float)))
            throw Error("checkpoint " + path + ": truncated");
    };
    read_floats(c.params);
    if (has_opt) {
        read_floats(c.m);
        read_floats(c.v);
    }
    uint32_t stored;
    std::memcpy(&stored, &header[10], sizeof(stored));
    if (payload_hash(c) != stored) throw Error("checkpoint " + path + ": checksum mismatch (corrupt)");
    return c;
}

}  // namespace gpt
