// Checkpoints (common/model/checkpoint.cpp) on any file: the checkpoint or a one-line
// gpt::Error, whatever config, counts and flags the header claims.
#include "fuzz.h"
#include "model/checkpoint.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::input_file(data, size);
    try {
        const gpt::Checkpoint c = gpt::load_checkpoint(path);
        if (c.params.size() != gpt::ParamLayout(c.config).total()) fuzz::fail("parameters of the wrong count");
        if (c.m.size() != c.v.size() || (!c.m.empty() && c.m.size() != c.params.size()))
            fuzz::fail("optimizer state of the wrong size");
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
