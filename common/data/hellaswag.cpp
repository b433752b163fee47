#include "data/hellaswag.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"
#include "util/lines.h"

namespace gpt {

namespace {

constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);
constexpr uint16_t kExampleStart = 0xFFFF;
// HellaSwag's validation file is 11 MB of JSON Lines, llm.c's 3.6 MB: far above is a wrong path.
constexpr size_t kMaxFileBytes = size_t(1) << 30;

// llm.c's file: a header of 256 int32 (magic, version, examples, longest example in bytes), then
// per example the uint16 values: 65535, the example's bytes (these fields included), its index,
// the label, the number of endings, the context's length and tokens, each ending's length and
// tokens.
std::vector<EvalExample> read_bin(const std::string& path, const std::string& data) {
    auto fail = [&](const std::string& why) -> Error { return Error("HellaSwag file " + path + ": " + why); };
    int32_t header[256];
    std::memcpy(header, data.data(), kHeaderBytes);
    if (header[1] != kEvalVersion)
        throw fail("version " + std::to_string(header[1]) + ", only version " + std::to_string(kEvalVersion) +
                   " (llm.c's) is known");
    if (header[2] <= 0) throw fail("the header counts " + std::to_string(header[2]) + " examples");
    const size_t values = (data.size() - kHeaderBytes) / 2;
    if ((data.size() - kHeaderBytes) % 2) throw fail("truncated: an odd number of bytes after the header");
    std::vector<uint16_t> v(values);
    if (values > 0) std::memcpy(v.data(), data.data() + kHeaderBytes, values * 2);  // (an empty v has no data())

    std::vector<EvalExample> examples;
    size_t at = 0;
    for (int i = 0; i < header[2]; ++i) {
        const std::string which = "example " + std::to_string(i + 1) + " of " + std::to_string(header[2]);
        if (at + 6 > values) throw fail("truncated: " + which + " is missing");
        if (v[at] != kExampleStart)
            throw fail(which + " does not start with 65535 (at byte " + std::to_string(kHeaderBytes + 2 * at) +
                       "); not an llm.c eval file, or a corrupt one");
        const size_t end = at + v[at + 1] / 2;
        if (v[at + 1] % 2 || end < at + 6) throw fail(which + " says it is " + std::to_string(v[at + 1]) + " bytes");
        if (end > values) throw fail("truncated: " + which + " ends past the end of the file");
        if (v[at + 2] != i)
            throw fail(which + " has the index " + std::to_string(v[at + 2]) + ", expected " + std::to_string(i));
        EvalExample e;
        e.line = i + 1;
        e.label = v[at + 3];
        const int endings = v[at + 4];
        if (endings < 1 || endings > kMaxEndings)
            throw fail(which + " has " + std::to_string(endings) + " endings; 1 to " + std::to_string(kMaxEndings) +
                       " are possible");
        if (e.label >= endings)
            throw fail(which + " has the label " + std::to_string(e.label) + ", but " + std::to_string(endings) +
                       " endings");
        size_t p = at + 5;
        auto tokens = [&](const std::string& what) {
            if (p >= end) throw fail(which + " ends before its " + what);
            const size_t n = v[p++];
            if (n == 0) throw fail(which + " has an empty " + what);
            if (p + n > end) throw fail(which + ": its " + what + " runs past the example's end");
            std::vector<int> t(v.begin() + std::ptrdiff_t(p), v.begin() + std::ptrdiff_t(p + n));
            p += n;
            return t;
        };
        e.context = tokens("context");
        for (int k = 0; k < endings; ++k) e.endings.push_back(tokens("ending " + std::to_string(k + 1)));
        if (p != end) throw fail(which + " holds " + std::to_string(2 * (end - p)) + " bytes after its last ending");
        examples.push_back(std::move(e));
        at = end;
    }
    if (at != values)
        throw fail(std::to_string(2 * (values - at)) + " bytes after the last of the " + std::to_string(header[2]) +
                   " examples the header counts");
    return examples;
}

// An example's "label": a number, or a string of decimal digits ("0", as in the Hugging Face copy
// of HellaSwag) read as the number it writes; NaN for anything else.
double label_number(const Json& label) {
    if (label.kind == Json::Number) return label.number;
    if (label.kind != Json::String || label.string.empty() ||
        label.string.find_first_not_of("0123456789") != std::string::npos)
        return std::numeric_limits<double>::quiet_NaN();
    double n = 0;  // a double: "99999999999999999999" only grows out of range, never wraps
    for (const char c : label.string) n = 10 * n + (c - '0');
    return n;
}

// The original release: one JSON object per line, with "ctx" (the context), "endings" (the
// candidate endings) and "label" (the index of the right one).
std::vector<EvalExample> read_jsonl(const std::string& path, const std::string& data, const Tokenizer* tokenizer) {
    if (!tokenizer)
        throw Error("HellaSwag file " + path + ": JSON Lines are encoded with the GPT-2 tokenizer, which was not "
                    "found (--tokenizer DIR; cmake --build build/cpu --target data installs it)");
    std::vector<EvalExample> examples;
    int64_t line_number = 0;
    size_t at = 0;
    for (std::string_view line; next_line(data, at, line);) {
        ++line_number;
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        const std::string where = "HellaSwag file " + path + ":" + std::to_string(line_number) + ": ";
        Json j;
        try {
            j = Json::parse(line);
        } catch (const Error& e) {
            throw Error(where + e.what());
        }
        if (j.kind != Json::Object) throw Error(where + "not a JSON object");
        for (const char* key : {"ctx", "endings", "label"})
            if (!j.has(key)) throw Error(where + "no \"" + key + "\" (HellaSwag's lines have ctx, endings, label)");
        if (j["ctx"].kind != Json::String) throw Error(where + "\"ctx\" is not a string");
        const Json& endings = j["endings"];
        if (endings.kind != Json::Array || endings.array.empty())
            throw Error(where + "\"endings\" is not a list of strings");
        if (endings.array.size() > size_t(kMaxEndings))
            throw Error(where + std::to_string(endings.array.size()) + " endings; 1 to " + std::to_string(kMaxEndings) +
                        " are possible");
        const Json& label = j["label"];
        if (label.kind == Json::String && label.string.empty())
            throw Error(where + "\"label\" is empty (the test split has no answers: use the validation split)");
        const double label_index = label_number(label);
        // The range first: a double outside int's range must not be converted (NaN fails it too).
        if (!(label_index >= 0 && label_index < double(endings.array.size())) || label_index != std::floor(label_index))
            throw Error(where + "\"label\" is not the index of one of its " + std::to_string(endings.array.size()) +
                        " endings");
        EvalExample e;
        e.line = line_number;
        e.label = static_cast<int>(label_index);
        e.context = tokenizer->encode(j["ctx"].string);
        if (e.context.empty()) throw Error(where + "the context is empty");
        for (const Json& ending : endings.array) {
            if (ending.kind != Json::String) throw Error(where + "\"endings\" is not a list of strings");
            // As llm.c and build-nanogpt do: the ending follows the context after a space.
            e.endings.push_back(tokenizer->encode(" " + ending.string));
        }
        examples.push_back(std::move(e));
    }
    if (examples.empty()) throw Error("HellaSwag file " + path + ": no examples");
    return examples;
}

}  // namespace

int EvalExample::longest_row() const {
    size_t longest = 0;
    for (const std::vector<int>& ending : endings) longest = std::max(longest, context.size() + ending.size());
    return static_cast<int>(longest);
}

std::vector<EvalExample> load_hellaswag(const std::string& path, const Tokenizer* tokenizer) {
    const std::string data = read_regular_file(path, "HellaSwag file", kMaxFileBytes);
    int32_t magic = 0;
    if (data.size() >= sizeof(magic)) std::memcpy(&magic, data.data(), sizeof(magic));
    if (magic == kEvalMagic) {
        if (data.size() < kHeaderBytes)
            throw Error("HellaSwag file " + path + ": truncated: " + std::to_string(data.size()) +
                        " bytes, fewer than the 1024-byte header");
        return read_bin(path, data);
    }
    const size_t first = data.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && data[first] == '{') return read_jsonl(path, data, tokenizer);
    throw Error("HellaSwag file " + path + ": neither llm.c's eval file (bad magic " + std::to_string(magic) +
                ", expected " + std::to_string(kEvalMagic) + ") nor JSON Lines (a line that starts with '{')");
}

void write_hellaswag_bin(const std::string& path, const std::vector<EvalExample>& examples) {
    if (examples.empty()) throw Error("HellaSwag file " + path + ": no examples to write");
    std::vector<uint16_t> stream;
    int32_t longest = 0;
    for (size_t i = 0; i < examples.size(); ++i) {
        const EvalExample& e = examples[i];
        const size_t begin = stream.size();
        stream.insert(stream.end(), {kExampleStart, 0, uint16_t(i), uint16_t(e.label), uint16_t(e.endings.size()),
                                     uint16_t(e.context.size())});
        stream.insert(stream.end(), e.context.begin(), e.context.end());
        for (const std::vector<int>& ending : e.endings) {
            stream.push_back(uint16_t(ending.size()));
            stream.insert(stream.end(), ending.begin(), ending.end());
        }
        const size_t bytes = 2 * (stream.size() - begin);
        if (bytes >= 65536 || i >= 65535)
            throw Error("HellaSwag file " + path + ": example " + std::to_string(i + 1) +
                        " does not fit llm.c's format (64 KB per example, 65535 examples)");
        stream[begin + 1] = uint16_t(bytes);
        longest = std::max(longest, int32_t(bytes));
    }
    int32_t header[256] = {kEvalMagic, kEvalVersion, int32_t(examples.size()), longest};
    ReplacingFile file(path, "HellaSwag file");
    file.write(header, sizeof(header));
    file.write(stream.data(), stream.size() * sizeof(uint16_t));
    file.commit();
}

int lowest_mean_loss(const std::vector<double>& means) {
    int best = 0;
    double best_mean = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < means.size(); ++k)
        if (means[k] < best_mean) {  // strictly: the first of equal means wins
            best_mean = means[k];
            best = static_cast<int>(k);
        }
    return best;
}

}  // namespace gpt
