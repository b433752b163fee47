// The data loader: consecutive B x T windows over the shards, in exactly the order of
// docs/formats.md ("Data loader order"). No shuffling, so the CPU reference, every GPU stage
// and the PyTorch reference see the same batches and their loss curves can be compared.
#include "data/loader.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "data/shard.h"
#include "util/error.h"

namespace gpt {

DataLoader::DataLoader(std::vector<std::string> shard_paths, int B, int T, int rank, int world,
                       int vocab_size)
    : paths_(std::move(shard_paths)), B_(B), T_(T), rank_(rank), world_(world), vocab_size_(vocab_size) {
    if (paths_.empty()) throw Error("data loader: no shards given");
    if (B < 1 || T < 1)
        throw Error("data loader: batch " + std::to_string(B) + " and sequence length " +
                    std::to_string(T) + " must both be at least 1");
    if (world < 1 || rank < 0 || rank >= world)
        throw Error("data loader: rank " + std::to_string(rank) + " is not in [0, world = " +
                    std::to_string(world) + ")");
    if (vocab_size < 1)
        throw Error("data loader: vocabulary size " + std::to_string(vocab_size) + " must be positive");

    // Every rank advances by the whole world's batch, so one step needs B*T*world tokens plus
    // one for the last target.
    const int64_t step_tokens = static_cast<int64_t>(B) * T * world;
    const int64_t needed = step_tokens + 1;

    // Validate every header and size now, so that a bad shard is reported before training
    // starts, not hours later when the loader reaches it. Token ids are checked as each shard
    // is loaded: reading every shard up front would take minutes on a large data set.
    // A shard too short for one step is skipped, not fatal: one short shard (say, the last of a
    // data set) should not make the others unusable. Only a data set with no usable shard is.
    std::vector<std::string> usable;
    std::vector<std::pair<std::string, int64_t>> skipped;
    for (const std::string& path : paths_) {
        const int64_t count = shard_token_count(path);
        if (count < needed) {
            skipped.emplace_back(path, count);
            continue;
        }
        usable.push_back(path);
        total_tokens_ += count;
        batches_per_pass_ += (count - 1) / step_tokens;  // the windows of next(), below
    }
    const std::string batch_needs = "fewer than one batch needs (B*T*world+1 = " + std::to_string(B) + "*" +
                                    std::to_string(T) + "*" + std::to_string(world) + "+1 = " +
                                    std::to_string(needed) + ")";
    if (usable.empty()) {
        const auto largest = std::max_element(skipped.begin(), skipped.end(),
                                              [](const auto& a, const auto& b) { return a.second < b.second; });
        throw Error("shard " + largest->first + " holds " + std::to_string(largest->second) + " tokens, " +
                    batch_needs +
                    (skipped.size() > 1 ? "; it is the largest of the " + std::to_string(skipped.size()) + " shards"
                                        : "") +
                    "; use a smaller --batch or --seq");
    }
    for (const auto& [path, count] : skipped)
        std::printf("warning: skipping shard %s: it holds %lld tokens, %s\n", path.c_str(),
                    static_cast<long long>(count), batch_needs.c_str());
    paths_ = std::move(usable);
    load_shard(0);
}

void DataLoader::load_shard(size_t index) {
    shard_ = index;
    pos_ = 0;
    // Only the current shard lives in memory: FineWeb-sized data sets are many gigabytes.
    tokens_ = read_shard(paths_[index]);
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (tokens_[i] >= vocab_size_)
            throw Error("shard " + paths_[index] + ": token " + std::to_string(tokens_[i]) + " at position " +
                        std::to_string(i) + " is not below the vocabulary size " + std::to_string(vocab_size_) +
                        " (a shard made with another tokenizer?)");
    }
}

Batch DataLoader::next() {
    const int64_t window = static_cast<int64_t>(B_) * T_;
    const int64_t step_tokens = window * world_;

    // Ranks take disjoint, adjacent windows of the same step: rank r starts r windows in.
    const int64_t start = pos_ + rank_ * window;
    Batch batch;
    batch.inputs.assign(tokens_.begin() + start, tokens_.begin() + start + window);
    batch.targets.assign(tokens_.begin() + start + 1, tokens_.begin() + start + window + 1);

    // Advance; if the next step would run past the end of this shard, move to the next shard
    // (after the last one, back to the first). The tail of a shard that is shorter than a
    // step is skipped, exactly as in docs/formats.md.
    pos_ += step_tokens;
    if (pos_ + step_tokens + 1 > static_cast<int64_t>(tokens_.size())) {
        const size_t next_shard = (shard_ + 1) % paths_.size();
        if (next_shard == 0) ++passes_;
        if (next_shard == shard_)
            pos_ = 0;  // a single shard: it is already in memory
        else
            load_shard(next_shard);
    }
    return batch;
}

void DataLoader::seek(const Position& p) {
    const int64_t step_tokens = static_cast<int64_t>(B_) * T_ * world_;
    if (p.shard < 0 || p.shard >= static_cast<int64_t>(paths_.size()))
        throw Error("data position: shard " + std::to_string(p.shard) + " does not exist (" +
                    std::to_string(paths_.size()) + " shard(s))");
    if (static_cast<size_t>(p.shard) != shard_) load_shard(static_cast<size_t>(p.shard));
    if (p.pos < 0 || p.pos % step_tokens != 0 || p.pos + step_tokens + 1 > static_cast<int64_t>(tokens_.size()))
        throw Error("data position: token " + std::to_string(p.pos) + " of shard " + paths_[shard_] +
                    " is not the start of a step's windows");
    pos_ = p.pos;
}

void DataLoader::reset() {
    if (shard_ == 0)
        pos_ = 0;
    else
        load_shard(0);
}

}  // namespace gpt
