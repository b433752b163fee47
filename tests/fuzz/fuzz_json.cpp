// The JSON reader (common/util/json.h) on any bytes: a value or a one-line gpt::Error, never a
// crash, a hang or a sanitizer report (deep nesting, huge numbers, broken escapes, ...).
#include <string_view>

#include "fuzz.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const gpt::Json json = gpt::Json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
        if (json.kind == gpt::Json::Array) (void)json.numbers();
        if (json.kind == gpt::Json::Object && json.has("losses")) (void)json["losses"].numbers();
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
