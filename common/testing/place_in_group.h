// A stage's policy as process `rank` of `world` sees it, for tests that build a model the way
// each process of a run would (the memory estimate of several processes and of ZeRO-1), without
// starting processes: its Parallel says where it is and what it keeps, and never communicates.
#pragma once
#include <string>

#include "train/parallel.h"

namespace gpt::test {

template <int kRank, int kWorld, int kZeroStage>
struct PlaceInGroup {
    static constexpr const char* source = __FILE__;
    int rank() const { return kRank; }
    int world() const { return kWorld; }
    std::string describe() const { return "rank " + std::to_string(kRank) + " of " + std::to_string(kWorld); }
    bool shards_optimizer() const { return kZeroStage == 1 && kWorld > 1; }
    Shard shard(size_t total) const { return shards_optimizer() ? shard_of(total, kRank, kWorld) : whole(total); }
};

template <class Stage, int kRank, int kWorld, int kZeroStage>
struct AsProcess : Stage {
    using Parallel = PlaceInGroup<kRank, kWorld, kZeroStage>;
};

}  // namespace gpt::test
