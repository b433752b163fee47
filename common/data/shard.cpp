// Token shards in the llm.c format (docs/formats.md, "Token shards").
//
// A shard is a 1024-byte header of 256 int32 (magic, version, token count, zeros) followed by
// the tokens as uint16. Both the header and the tokens are little-endian; we read and write
// them with plain memory copies, which is right on every little-endian host (x86-64, ARM64,
// every machine with a CUDA GPU).
#include "data/shard.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace fs = std::filesystem;

namespace gpt {

namespace {

constexpr int64_t kHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024

// What the header promises, after every check that needs only the header and the file size.
struct ShardInfo {
    int64_t tokens = 0;
};

std::string describe_version(int32_t version) {
    // llm.c writes version 1 for GPT-2 (uint16 tokens) and version 7 for Llama-3 (uint32
    // tokens). Anything else is not a format we know; say so rather than guess a width.
    if (version == 7)
        return "version 7: tokens are not uint16 (llm.c's 32-bit Llama-3 format); "
               "only version 1 shards (uint16 GPT-2 tokens) are supported";
    return "version " + std::to_string(version) +
           ": tokens are not uint16 (unknown format); only version 1 shards (uint16 GPT-2 "
           "tokens) are supported";
}

// Opens PATH, reads and checks its header against the file size. Leaves `in` positioned at
// the first token.
ShardInfo open_and_check(const std::string& path, std::ifstream& in) {
    in = open_regular_file(path, "shard");
    std::error_code ec;
    const uintmax_t file_bytes = fs::file_size(path, ec);
    if (ec) throw Error("shard " + path + ": cannot read its size (" + ec.message() + ")");
    if (file_bytes < static_cast<uintmax_t>(kHeaderBytes))
        throw Error("shard " + path + ": truncated: " + std::to_string(file_bytes) +
                    " bytes, fewer than the " + std::to_string(kHeaderBytes) + "-byte header");

    int32_t header[kShardHeaderInts];
    if (!in.read(reinterpret_cast<char*>(header), sizeof(header)))
        throw Error("shard " + path + ": cannot read the header");

    if (header[0] != kShardMagic)
        throw Error("shard " + path + ": bad magic " + std::to_string(header[0]) + " (expected " +
                    std::to_string(kShardMagic) + "); not an llm.c token shard");
    if (header[1] != kShardVersion) throw Error("shard " + path + ": " + describe_version(header[1]));
    if (header[2] < 0)
        throw Error("shard " + path + ": negative token count " + std::to_string(header[2]) +
                    " in the header");

    // The size check catches both an interrupted copy (too short) and a file whose header
    // lies about its length (too long), before we trust the count.
    ShardInfo info;
    info.tokens = header[2];
    const uintmax_t expected = static_cast<uintmax_t>(kHeaderBytes + 2 * info.tokens);
    if (file_bytes != expected) {
        const char* what = file_bytes < expected ? "truncated" : "size mismatch";
        throw Error("shard " + path + ": " + what + ": the header says " +
                    std::to_string(info.tokens) + " tokens, so " + std::to_string(expected) +
                    " bytes are expected (1024 + 2 per token), but the file has " +
                    std::to_string(file_bytes));
    }
    return info;
}

}  // namespace

std::vector<uint16_t> read_shard(const std::string& path) {
    std::ifstream in;
    const ShardInfo info = open_and_check(path, in);
    std::vector<uint16_t> tokens(static_cast<size_t>(info.tokens));
    if (!tokens.empty() &&
        !in.read(reinterpret_cast<char*>(tokens.data()), tokens.size() * sizeof(uint16_t)))
        throw Error("shard " + path + ": truncated while reading " + std::to_string(info.tokens) +
                    " tokens");
    return tokens;
}

int64_t shard_token_count(const std::string& path) {
    std::ifstream in;
    return open_and_check(path, in).tokens;
}

void write_shard(const std::string& path, const std::vector<int>& tokens) {
    std::vector<uint16_t> packed(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] < 0 || tokens[i] > std::numeric_limits<uint16_t>::max())
            throw Error("shard " + path + ": token " + std::to_string(tokens[i]) + " at index " +
                        std::to_string(i) + " does not fit in uint16");
        packed[i] = static_cast<uint16_t>(tokens[i]);
    }
    write_shard(path, packed.data(), packed.size());
}

void write_shard(const std::string& path, const uint16_t* tokens, size_t count) {
    if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw Error("shard " + path + ": " + std::to_string(count) +
                    " tokens do not fit in one shard (the header count is an int32)");
    int32_t header[kShardHeaderInts] = {};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = static_cast<int32_t>(count);

    // A run killed midway leaves no PATH that looks like a shard but is cut short.
    ReplacingFile file(path, "shard");
    file.write(header, sizeof(header));
    file.write(tokens, count * sizeof(uint16_t));
    file.commit();
}

std::vector<int64_t> shard_sizes(int64_t total, int64_t max_tokens, int64_t min_tokens) {
    if (min_tokens < 1 || min_tokens > max_tokens)
        throw Error("shard sizes: the minimum " + std::to_string(min_tokens) + " must be in [1, the maximum " +
                    std::to_string(max_tokens) + "]");
    std::vector<int64_t> sizes;
    for (int64_t left = total; left > 0; left -= sizes.back()) sizes.push_back(std::min(left, max_tokens));
    if (sizes.size() > 1 && sizes.back() < min_tokens) {
        sizes[sizes.size() - 2] += sizes.back();
        sizes.pop_back();
    }
    return sizes;
}

namespace {

// The entries of DIR named like shards of SPLIT, by data set: NAME_split_*.bin (llm.c's naming,
// NAME_split_NNNNNN.bin) under NAME, the part before the last "_split_". Each list is sorted.
std::map<std::string, std::vector<std::string>> shards_by_name(const std::string& dir, const std::string& split) {
    require_directory(dir, "data directory");
    const std::string infix = "_" + split + "_";
    const std::string suffix = ".bin";
    std::map<std::string, std::vector<std::string>> found;
    std::error_code ec;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.size() < infix.size() + suffix.size()) continue;
        if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
        const size_t at = name.rfind(infix);
        if (at == std::string::npos) continue;
        found[name.substr(0, at)].push_back(entry.path().string());
    }
    if (ec) throw Error("data directory " + dir + ": cannot list it (" + ec.message() + ")");
    for (auto& [name, paths] : found) std::sort(paths.begin(), paths.end());
    return found;
}

std::string count_of(size_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

// A run reads the shards of every data set in its folder as one: perhaps wanted (a corpus made in
// parts with gpt_prepare --add-to-folder), perhaps not (shards copied into the wrong folder). One
// line says which sets there are and what each brings, so that a mix is never silent.
void warn_of_several_data_sets(const std::string& dir) {
    const std::map<std::string, DataSetShards> sets = data_sets_in(dir);
    if (sets.size() < 2) return;
    std::string each;
    for (const auto& [name, shards] : sets) {
        int64_t tokens = 0;
        for (const std::string& path : shards.train) tokens += shard_token_count(path);
        each += (each.empty() ? "" : ", ") + name + " (" + count_of(shards.train.size(), "training shard") + ", " +
                with_commas(tokens) + " tokens; " + count_of(shards.val.size(), "validation shard") + ")";
    }
    std::printf("warning: data directory %s holds the shards of %zu data sets, which this run reads as one: %s; "
                "give each its own folder unless the mix is wanted\n",
                dir.c_str(), sets.size(), each.c_str());
}

}  // namespace

std::map<std::string, DataSetShards> data_sets_in(const std::string& dir) {
    std::map<std::string, DataSetShards> sets;
    for (auto& [name, paths] : shards_by_name(dir, "train")) sets[name].train = std::move(paths);
    for (auto& [name, paths] : shards_by_name(dir, "val")) sets[name].val = std::move(paths);
    return sets;
}

std::vector<std::string> find_shards(const std::string& dir, const std::string& split) {
    std::vector<std::string> found;
    for (const auto& [name, paths] : shards_by_name(dir, split)) {
        for (const std::string& path : paths) {
            // Named like a shard but a folder, a FIFO or a broken link: say so now rather than
            // train on the other shards without it.
            require_regular_file(path, "shard");
            found.push_back(path);
        }
    }
    if (found.empty()) throw Error("no *_" + split + "_*.bin shards in " + dir);
    // Lexicographic order is the contract: numbered shards are read 000000, 000001, ...
    std::sort(found.begin(), found.end());
    if (split == "train") warn_of_several_data_sets(dir);  // the trainer lists these first, and always
    return found;
}

}  // namespace gpt
