// The GPT-2 tokenizer (common/data/tokenizer.cpp) on hostile files and text. The first byte
// picks what the rest of the input is:
//   0: an encoder.json;
//   1: a vocab.bpe, read against GPT-2's real encoder.json;
//   2: text, encoded by the real tokenizer, which must decode to the same bytes.
// 1 and 2 need the real files, $GPT_DATA_DIR/gpt2 (the main build's `data` target makes them);
// without them those inputs are skipped, with a note.
#include <memory>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz.h"
#include "util/file.h"

namespace {

const std::string kDir = std::string(GPT_DATA_DIR) + "/gpt2";

// The real vocabulary without merges: mode 1 gives it its merge list.
gpt::Tokenizer* vocabulary() {
    static std::unique_ptr<gpt::Tokenizer> tok = [] {
        try {
            const std::string path = kDir + "/encoder.json";
            return std::make_unique<gpt::Tokenizer>(
                gpt::Tokenizer::from_encoder_json(gpt::read_regular_file(path, "tokenizer file"), path));
        } catch (const gpt::Error& e) {
            std::fprintf(stderr, "note: %s; vocab.bpe inputs are skipped\n", e.what());
            return std::unique_ptr<gpt::Tokenizer>();
        }
    }();
    return tok.get();
}

const gpt::Tokenizer* tokenizer() {
    static std::unique_ptr<gpt::Tokenizer> tok = [] {
        try {
            return std::make_unique<gpt::Tokenizer>(gpt::Tokenizer::load(kDir));
        } catch (const gpt::Error& e) {
            std::fprintf(stderr, "note: %s; text inputs are skipped\n", e.what());
            return std::unique_ptr<gpt::Tokenizer>();
        }
    }();
    return tok.get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        switch (data[0] % 3) {
            case 0:
                gpt::Tokenizer::from_encoder_json(rest, "encoder.json");
                break;
            case 1:
                if (gpt::Tokenizer* tok = vocabulary()) tok->read_merges(rest, "vocab.bpe");
                break;
            case 2:
                if (const gpt::Tokenizer* tok = tokenizer()) {
                    const std::vector<int> ids = tok->encode(rest);
                    for (const int id : ids)
                        if (id < 0 || id >= tok->vocab_size()) fuzz::fail("an id outside the vocabulary");
                    if (tok->decode(ids) != rest) fuzz::fail("decode(encode(text)) is not the text");
                }
                break;
        }
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
