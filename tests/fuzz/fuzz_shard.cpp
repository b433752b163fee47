// Token shards (common/data/shard.cpp) and the loader over them (loader.cpp) on any file: the
// tokens or a one-line gpt::Error, whatever the header claims (huge or negative counts, other
// versions) and however long the file really is.
#include <vector>

#include "data/loader.h"
#include "data/shard.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::input_file(data, size);
    try {
        const std::vector<uint16_t> tokens = gpt::read_shard(path);
        if (gpt::shard_token_count(path) != static_cast<int64_t>(tokens.size()))
            fuzz::fail("shard_token_count() disagrees with read_shard()");
        gpt::DataLoader loader({path}, 1, 3, 0, 1, 50257);
        for (int i = 0; i < 5; ++i) {
            const gpt::Batch b = loader.next();
            if (b.inputs.size() != 3 || b.targets.size() != 3) fuzz::fail("a batch of the wrong size");
        }
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
