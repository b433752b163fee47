// Hugging Face safetensors files (common/model/safetensors.cpp) on any file: the header reader and
// the GPT-2 loader give their result or a one-line gpt::Error, whatever lengths, dtypes, shapes
// and offsets the header claims. What they return is checked against their promises and against
// the input's bytes, read here independently; a GPT-2 that loads is written again (F32) and must
// read back the same, bit for bit.
//
// An input is a model.safetensors, or "config.json\n" + the text of a config.json + '\0' + the
// model.safetensors: the loader reads the config.json beside the model file when there is one,
// and without it derives n_head as C / 64, so that only a model of C >= 64 (100 KB and more)
// could load. No safetensors file begins with those bytes: as a header length they are far
// beyond the reader's limit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz.h"
#include "model/params.h"
#include "model/safetensors.h"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
        std::perror(path.c_str());
        std::abort();
    }
}

// Bytes per element of the dtypes the safetensors library defines; 0 for any other (F4 and
// F6 pack several elements a byte, and a reader may know dtypes newer than this list).
uint64_t dtype_bytes(const std::string& dtype) {
    static const std::pair<const char*, uint64_t> table[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I16", 2},
        {"U16", 2}, {"F16", 2}, {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8},
        {"F64", 8}};
    for (const auto& [name, bytes] : table)
        if (dtype == name) return bytes;
    return 0;
}

// IEEE half precision by its definition, not by the project's bit manipulation (util/bf16.h).
float f16_value(uint16_t h) {
    const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
    float x;
    if (exponent == 0x1F) x = mantissa ? NAN : INFINITY;
    else if (exponent == 0) x = std::ldexp(static_cast<float>(mantissa), -24);
    else x = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
    return sign ? -x : x;
}

bool same_float(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);  // a NaN's payload may change
    return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// read_safetensors_header's promises, and each float tensor's values against the raw bytes.
void check_header(const std::string& path, std::string_view file) {
    const gpt::SafetensorsFile st = gpt::read_safetensors_header(path);
    if (st.data_start < 8 || st.data_start - 8 > gpt::kSafetensorsMaxHeaderBytes || st.data_start > file.size())
        fuzz::fail("data_start outside the file", std::to_string(st.data_start));
    const uint64_t data_bytes = file.size() - st.data_start;

    // By begin; the tensors that hold bytes tile the data section from 0 to its end. An empty one
    // only has to lie within what is covered so far: at the begin of a full one, the header's
    // order ("by their begin offset") may put it before or after.
    uint64_t covered = 0, previous_begin = 0;
    for (const gpt::SafetensorsTensor& t : st.tensors) {
        const std::string what = "tensor \"" + t.name + "\"";
        if (t.begin < previous_begin) fuzz::fail("tensors not sorted by begin", what);
        previous_begin = t.begin;
        if (t.end < t.begin || t.end > data_bytes) fuzz::fail("offsets outside the data", what);
        if (t.end > t.begin) {
            if (t.begin != covered) fuzz::fail("a hole or an overlap before", what);
            covered = t.end;
        } else if (t.begin > covered) {
            fuzz::fail("an empty tensor past the data covered", what);
        }
        if (t.name == "__metadata__") fuzz::fail("__metadata__ read as a tensor");
        if (st.find(t.name) != &t) fuzz::fail("find() does not give the tensor, or its name repeats", what);

        uint64_t elements = 1;
        bool zero = false, overflow = false;
        for (uint64_t d : t.shape) zero |= d == 0;
        for (uint64_t d : t.shape) overflow |= !zero && __builtin_mul_overflow(elements, d, &elements);
        if (zero) elements = 0;
        if (overflow) fuzz::fail("a shape of more than 2^64 elements accepted", what);
        if (t.elements() != elements) fuzz::fail("elements() is not the shape's product", what);
        const uint64_t size = dtype_bytes(t.dtype);
        if (size != 0 && (elements > UINT64_MAX / size || elements * size != t.end - t.begin))
            fuzz::fail("the offsets' span is not elements x dtype size", what + " " + t.dtype);

        const bool is_float = t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16";
        std::vector<float> values;
        try {
            values = gpt::read_safetensors_floats(st, t);
        } catch (const gpt::Error& e) {
            fuzz::expect_one_line(e);
            if (is_float) fuzz::fail("a float tensor of a checked header not read", e.what());
            continue;
        }
        if (!is_float) fuzz::fail("a tensor read as floats from dtype", t.dtype);
        if (values.size() != elements) fuzz::fail("floats of the wrong count", what);
        const char* raw = file.data() + st.data_start + t.begin;
        for (uint64_t i = 0; i < elements; ++i) {
            float expected;
            if (t.dtype == "F32") {
                std::memcpy(&expected, raw + 4 * i, 4);
            } else {
                uint16_t h;
                std::memcpy(&h, raw + 2 * i, 2);
                const uint32_t bits = uint32_t(h) << 16;
                if (t.dtype == "BF16") std::memcpy(&expected, &bits, 4);
                else expected = f16_value(h);
            }
            if (!same_float(values[i], expected))
                fuzz::fail("a value not widened exactly", what + " element " + std::to_string(i));
        }
    }
    if (covered != data_bytes) fuzz::fail("data past the last tensor accepted");
}

// load_hf_gpt2's promises, and the round trip through save_hf_gpt2.
void check_model(const fs::path& model_file) {
    const gpt::HfImport import = gpt::load_hf_gpt2(model_file.string());
    const gpt::Checkpoint& c = import.checkpoint;
    if (c.params.size() != gpt::ParamLayout(c.config).total()) fuzz::fail("parameters of the wrong count");
    if (!c.m.empty() || !c.v.empty() || c.step != 0 || c.run.recorded)
        fuzz::fail("a safetensors model gave more than parameters");
    if (!gpt::first_non_finite(c.params, c.config, "parameter").empty()) fuzz::fail("a non-finite parameter");
    for (const std::string& note : import.notes)
        if (note.find_first_of("\r\n") != std::string::npos) fuzz::fail("a note of more than one line", note);

    // A failure to write or read back a model that loaded is a finding too, not a rejected input.
    const fs::path copy = fuzz::scratch() / "copy";
    try {
        gpt::save_hf_gpt2(copy.string(), c.config, c.params, gpt::HfDtype::kF32, "");
        const gpt::Checkpoint back = gpt::load_hf_gpt2(copy.string()).checkpoint;
        if (!(back.config == c.config) || back.params.size() != c.params.size() ||
            std::memcmp(back.params.data(), c.params.data(), c.params.size() * sizeof(float)) != 0)
            fuzz::fail("written again, the model reads back otherwise");
    } catch (const gpt::Error& e) {
        fuzz::fail("a model that loaded, written again, gives an error", e.what());
    }
    fs::remove_all(copy);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    const fs::path model_file = fuzz::scratch() / "model.safetensors", config_file = fuzz::scratch() / "config.json";
    constexpr std::string_view kConfigPrefix = "config.json\n";
    if (input.substr(0, kConfigPrefix.size()) == kConfigPrefix) {
        input.remove_prefix(kConfigPrefix.size());
        const size_t end = std::min(input.find('\0'), input.size());
        write_file(config_file, input.substr(0, end));
        input.remove_prefix(std::min(end + 1, input.size()));
    } else {
        fs::remove(config_file);
    }
    write_file(model_file, input);

    try {
        check_header(model_file.string(), input);
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    try {
        check_model(model_file);
    } catch (const gpt::Error& e) {
        fuzz::expect_one_line(e);
    }
    return 0;
}
