// Token shards in the llm.c format (docs/formats.md): 256 int32 header, then uint16 tokens.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gpt {

constexpr int kShardMagic = 20240520;
constexpr int kShardVersion = 1;  // uint16 tokens
constexpr int kShardHeaderInts = 256;

// Reads a whole shard; throws gpt::Error naming the file if it is missing, has a bad magic,
// an unsupported version (token width), or a size that does not match its token count.
std::vector<uint16_t> read_shard(const std::string& path);

// Token count from the header, after the same checks as read_shard (without reading tokens).
int64_t shard_token_count(const std::string& path);

// Writes atomically (PATH.tmp, then rename). Throws if a token does not fit in uint16.
void write_shard(const std::string& path, const std::vector<int>& tokens);
void write_shard(const std::string& path, const uint16_t* tokens, size_t count);

// How gpt_prepare cuts a split of `total` tokens into shards (docs/formats.md): shards of
// max_tokens, but a last shard shorter than min_tokens joins the one before it, so that every
// shard of a split of at least min_tokens holds at least min_tokens (and at most
// max_tokens + min_tokens - 1). Needs 1 <= min_tokens <= max_tokens.
std::vector<int64_t> shard_sizes(int64_t total, int64_t max_tokens, int64_t min_tokens);

// Sorted list of DIR/*_{split}_*.bin ("train" or "val"); throws if DIR is missing or holds none.
// A run reads every one of them, whatever their NAME: find_shards(dir, "train"), which a trainer
// calls first, prints one warning line when DIR holds the shards of more than one data set.
std::vector<std::string> find_shards(const std::string& dir, const std::string& split);

// The data sets of a folder, by the NAME of their shards NAME_train_*.bin and NAME_val_*.bin
// (gpt_prepare's --name): each one's shard files, sorted. Throws if DIR is not a directory.
struct DataSetShards {
    std::vector<std::string> train, val;
};
std::map<std::string, DataSetShards> data_sets_in(const std::string& dir);

}  // namespace gpt
