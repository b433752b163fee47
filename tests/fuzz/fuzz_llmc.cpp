// llm.c model files (common/model/llmc.cpp) on any file, through load_model_file, which also
// tells them from checkpoints: the model or a one-line gpt::Error, whatever sizes, version and
// padded vocabulary the header claims. A file that loads is written again and must read back
// the same, bit for bit (bf16 values round to themselves).
#include <cstring>
#include <filesystem>

#include "fuzz.h"
#include "model/llmc.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz::input_file(data, size);
    try {
        const gpt::Checkpoint c = gpt::load_model_file(path);
        if (c.params.size() != gpt::ParamLayout(c.config).total()) fuzz::fail("parameters of the wrong count");
        if (gpt::model_file_kind(path) != gpt::ModelFileKind::kLlmc) return 0;  // fuzz_checkpoint's part

        gpt::LlmcFormat format;
        const gpt::Checkpoint again = gpt::load_llmc_model(path, &format);
        if (!again.m.empty() || !again.v.empty() || again.step != 0 || again.run.recorded)
            fuzz::fail("an llm.c model file gave more than parameters");
        if (!(format.padded_vocab >= c.config.vocab_size)) fuzz::fail("padded vocabulary smaller than V");
        if (!gpt::first_non_finite(c.params, c.config, "parameter").empty()) fuzz::fail("a non-finite parameter");

        static const std::string copy = path + ".copy";
        gpt::save_llmc_model(copy, c.config, c.params, format.padded_vocab, format.version);
        gpt::LlmcFormat copy_format;
        const gpt::Checkpoint back = gpt::load_llmc_model(copy, &copy_format);
        std::filesystem::remove(copy);
        if (!(back.config == c.config) || copy_format.version != format.version ||
            copy_format.padded_vocab != format.padded_vocab || back.params.size() != c.params.size() ||
            std::memcmp(back.params.data(), c.params.data(), c.params.size() * sizeof(float)) != 0)
            fuzz::fail("written again, the model reads back otherwise");
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
