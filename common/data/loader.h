// Deterministic B x T batch loader over a list of shards, in the order of docs/formats.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

struct Batch {
    std::vector<int> inputs;   // B*T token ids, row-major
    std::vector<int> targets;  // inputs shifted by one
};

class DataLoader {
  public:
    // Validates every shard's header up front, and each shard's token ids (< vocab_size) when it
    // is loaded; throws gpt::Error naming the bad shard. A shard without room for one batch of
    // B*T*world + 1 tokens is skipped with a warning on stdout; none with room is an error.
    DataLoader(std::vector<std::string> shard_paths, int B, int T, int rank, int world,
               int vocab_size);

    Batch next();
    void reset();

    // Where the next window starts, to save in a checkpoint; seek() returns there and throws
    // gpt::Error if the position is not a window start of this data (other data, B or T).
    struct Position {
        int64_t shard = 0, pos = 0;
    };
    Position position() const { return {static_cast<int64_t>(shard_), pos_}; }
    void seek(const Position& p);
    int64_t total_tokens() const { return total_tokens_; }  // of the shards it reads
    // next() calls in one pass over the data, before it starts again from the first window.
    int64_t batches_per_pass() const { return batches_per_pass_; }
    // How often next() went back to the first window after the last: passes completed since
    // the loader was made.
    int64_t passes() const { return passes_; }
    int B() const { return B_; }
    int T() const { return T_; }

  private:
    void load_shard(size_t index);

    std::vector<std::string> paths_;
    int B_, T_, rank_, world_, vocab_size_;
    size_t shard_ = 0;
    int64_t pos_ = 0;
    int64_t total_tokens_ = 0;
    int64_t batches_per_pass_ = 0;
    int64_t passes_ = 0;
    std::vector<uint16_t> tokens_;  // the current shard
};

}  // namespace gpt
