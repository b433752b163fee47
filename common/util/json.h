// A small, strict JSON reader: the GPT-2 vocabulary (encoder.json), Hugging Face's config.json
// and safetensors headers, and the files the project writes itself (reference curves, benchmark
// results). UTF-8 text only; objects, arrays, numbers, strings with every JSON escape (surrogate
// pairs too), true/false/null. Errors are one line with the byte offset; parse_file() puts the
// file's name in front.
//
// Why our own and not a library: the GPU machines that build this project may have no
// internet and no extra packages, and one short header is easy to read. Since it reads files a user
// hands us, it is hardened like any parser of untrusted input (and fuzzed: tests/fuzz):
// nesting depth, file size and value count are bounded, so a hostile file ends in a one-line
// error, never in a stack overflow or an exhausted memory.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"
#include "util/file.h"
#include "util/utf8.h"

namespace gpt {

// s as a JSON string, quotes included: what JSON needs escaped is escaped, UTF-8 passes through,
// and a byte that is not UTF-8 (a text sample may stop inside a character) becomes U+FFFD, so
// that the reader above takes back whatever was written.
inline std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : sanitize_utf8(s)) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += static_cast<char>(c);  // UTF-8 passes through
                }
        }
    }
    return out + "\"";
}

struct Json {
    // Limits, far above what any file of the project needs (encoder.json: 1 MB, 50,257
    // values, depth 1). Each limit stops one attack: depth, a recursion per '[' that would
    // overflow the stack; values, about 150 bytes of memory each for a few bytes of text.
    static constexpr size_t kMaxBytes = size_t(64) << 20;
    static constexpr int kMaxDepth = 64;
    static constexpr size_t kMaxValues = size_t(1) << 20;

    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool boolean = false;
    double number = 0.0;
    std::string string;
    std::vector<Json> array;
    std::map<std::string, Json> object;
    size_t object_entries = 0;  // members as written, duplicates included

    bool has(const std::string& key) const { return kind == Object && object.count(key); }
    const Json& operator[](const std::string& key) const {
        auto it = object.find(key);
        if (kind != Object || it == object.end()) throw Error("JSON: missing key '" + key + "'");
        return it->second;
    }
    // Numbers of an array; null (NaN or infinity written by Python) becomes NaN.
    std::vector<double> numbers() const {
        if (kind != Array) throw Error("JSON: expected an array of numbers");
        std::vector<double> out;
        for (const Json& v : array) out.push_back(v.kind == Number ? v.number : std::nan(""));
        return out;
    }

    // max_values: a tighter bound for a text whose size allows more values than its kind ever
    // holds (a safetensors header).
    static Json parse(std::string_view text, size_t max_values = kMaxValues) {
        if (text.size() > kMaxBytes)
            throw Error("JSON text of " + std::to_string(text.size()) + " bytes, more than the " +
                        std::to_string(kMaxBytes) + " this reader accepts");
        if (const size_t bad = first_invalid_utf8(text); bad < text.size()) {
            char code[8];
            std::snprintf(code, sizeof(code), "0x%02x", static_cast<unsigned char>(text[bad]));
            throw Error("JSON text is not UTF-8: byte " + std::to_string(bad) + " (" + code +
                        ") does not begin a well-formed character");
        }
        Reader r{text};
        r.max_values = max_values;
        Json value = r.value();
        r.space();
        if (r.at != text.size()) r.fail("unexpected text after the value");
        return value;
    }
    static Json parse_file(const std::string& path) {
        const std::string text = read_regular_file(path, "JSON file", kMaxBytes);
        try {
            return parse(text);
        } catch (const Error& e) {
            throw Error("JSON file " + path + ": " + e.what());
        }
    }

  private:
    struct Reader {
        std::string_view s;
        size_t at = 0;
        int depth = 0;      // arrays and objects open around the current position
        size_t values = 0;  // values read so far
        size_t max_values = kMaxValues;

        [[noreturn]] void fail(const std::string& what) const {
            throw Error("malformed JSON at byte " + std::to_string(at) + ": " + what);
        }
        char peek() const { return at < s.size() ? s[at] : '\0'; }
        // A byte of the text for a message: 'x', or its code if it is not printable (a newline
        // would break the one-line error).
        static std::string shown(char c) {
            if (c >= 0x20 && c < 0x7F) return std::string("'") + c + "'";
            char code[16];
            std::snprintf(code, sizeof(code), "byte 0x%02x", static_cast<unsigned char>(c));
            return code;
        }
        void space() {
            while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) ++at;
        }
        void expect(char c) {
            if (at >= s.size()) fail(std::string("expected '") + c + "', found the end");
            if (s[at] != c) fail(std::string("expected '") + c + "'");
            ++at;
        }
        bool word(std::string_view w) {
            if (s.substr(at, w.size()) != w) return false;
            at += w.size();
            return true;
        }
        unsigned hex4() {
            if (at + 4 > s.size()) fail("truncated \\u escape");
            unsigned v = 0;
            for (int i = 0; i < 4; ++i) {
                const char h = s[at++];
                v <<= 4;
                if (h >= '0' && h <= '9') v |= h - '0';
                else if (h >= 'a' && h <= 'f') v |= h - 'a' + 10;
                else if (h >= 'A' && h <= 'F') v |= h - 'A' + 10;
                else fail("bad hex digit in \\u escape");
            }
            return v;
        }
        std::string str() {
            expect('"');
            std::string out;
            while (true) {
                if (at >= s.size()) fail("unterminated string");
                const char c = s[at++];
                if (c == '"') return out;
                if (static_cast<unsigned char>(c) < 0x20) fail("control character inside a string");
                if (c != '\\') {
                    out += c;
                    continue;
                }
                if (at >= s.size()) fail("unterminated escape");
                switch (const char e = s[at++]) {
                    case '"': out += '"'; break;
                    case '\\': out += '\\'; break;
                    case '/': out += '/'; break;
                    case 'b': out += '\b'; break;
                    case 'f': out += '\f'; break;
                    case 'n': out += '\n'; break;
                    case 'r': out += '\r'; break;
                    case 't': out += '\t'; break;
                    case 'u': {
                        // Code points above U+FFFF are written as a surrogate pair \uD8xx\uDCxx.
                        char32_t cp = hex4();
                        if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in \\u escape");
                        if (cp >= 0xD800 && cp <= 0xDBFF) {
                            if (s.substr(at, 2) != "\\u") fail("high surrogate without its low half");
                            at += 2;
                            const char32_t low = hex4();
                            if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate without its low half");
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        }
                        append_utf8(out, cp);
                        break;
                    }
                    default: fail("unknown escape: backslash, then " + shown(e));
                }
            }
        }
        // The items of an object or array after its opening bracket: none, or item() separated
        // by commas, then `close`.
        template <class Item>
        void items(char close, Item&& item) {
            space();
            if (peek() == close) {
                ++at;
                return;
            }
            while (true) {
                item();
                space();
                if (peek() != ',') break;
                ++at;
            }
            expect(close);
        }
        // One '{' or '[' deeper for the life of this object.
        struct Nested {
            Reader& r;
            explicit Nested(Reader& reader) : r(reader) {
                if (++r.depth > kMaxDepth) r.fail("nested deeper than " + std::to_string(kMaxDepth) + " levels");
            }
            ~Nested() { --r.depth; }
        };
        // A number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. strtod alone
        // would also take "0x1p3", "inf" or "1." and a locale's decimal comma.
        double number() {
            const size_t start = at;
            const auto digits = [&] {
                const size_t first = at;
                while (at < s.size() && s[at] >= '0' && s[at] <= '9') ++at;
                if (at == first) fail("expected a digit");
            };
            if (peek() == '-') ++at;
            if (peek() == '0') ++at;
            else digits();
            if (peek() == '.') ++at, digits();
            if (peek() == 'e' || peek() == 'E') {
                ++at;
                if (peek() == '+' || peek() == '-') ++at;
                digits();
            }
            return std::strtod(std::string(s.substr(start, at - start)).c_str(), nullptr);
        }
        Json value() {
            space();
            if (at >= s.size()) fail("unexpected end");
            if (++values > max_values) fail("more than " + std::to_string(max_values) + " values");
            Json v;
            const char c = s[at];
            if (c == '{') {
                const Nested nested(*this);
                v.kind = Object;
                ++at;
                items('}', [&] {
                    space();
                    std::string key = str();
                    space();
                    expect(':');
                    v.object[std::move(key)] = value();
                    ++v.object_entries;
                });
                return v;
            }
            if (c == '[') {
                const Nested nested(*this);
                v.kind = Array;
                ++at;
                items(']', [&] { v.array.push_back(value()); });
                return v;
            }
            if (c == '"') {
                v.kind = String;
                v.string = str();
                return v;
            }
            if (word("true")) return v.kind = Bool, v.boolean = true, v;
            if (word("false")) return v.kind = Bool, v;
            if (word("null")) return v;
            // Numbers; Python's json module also writes NaN, Infinity and -Infinity.
            if (word("NaN")) return v.kind = Number, v.number = std::nan(""), v;
            if (word("Infinity")) return v.kind = Number, v.number = INFINITY, v;
            if (word("-Infinity")) return v.kind = Number, v.number = -INFINITY, v;
            if (c != '-' && (c < '0' || c > '9')) fail("unexpected " + shown(c));
            v.number = number();
            v.kind = Number;
            return v;
        }
    };
};

}  // namespace gpt
