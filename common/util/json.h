// A minimal JSON reader, enough for the files the project writes itself (reference curves,
// benchmark results): objects, arrays, numbers, strings, true/false/null.
#pragma once
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "util/error.h"

namespace gpt {

struct Json {
    enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
    bool boolean = false;
    double number = 0.0;
    std::string string;
    std::vector<Json> array;
    std::map<std::string, Json> object;

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

    static Json parse(const std::string& text) {
        size_t at = 0;
        Json value = parse_value(text, at);
        skip_space(text, at);
        if (at != text.size()) throw Error("JSON: trailing characters at offset " + std::to_string(at));
        return value;
    }
    static Json parse_file(const std::string& path) {
        std::ifstream in(path);
        if (!in) throw Error("cannot open " + path);
        std::stringstream s;
        s << in.rdbuf();
        try {
            return parse(s.str());
        } catch (const Error& e) {
            throw Error(path + ": " + e.what());
        }
    }

  private:
    static void skip_space(const std::string& s, size_t& at) {
        while (at < s.size() && (s[at] == ' ' || s[at] == '\n' || s[at] == '\r' || s[at] == '\t')) ++at;
    }
    static void expect(const std::string& s, size_t& at, const char* word) {
        const std::string w = word;
        if (s.compare(at, w.size(), w) != 0) throw Error("JSON: expected '" + w + "' at offset " + std::to_string(at));
        at += w.size();
    }
    static std::string parse_string(const std::string& s, size_t& at) {
        expect(s, at, "\"");
        std::string out;
        while (at < s.size() && s[at] != '"') {
            char c = s[at++];
            if (c == '\\') {
                if (at >= s.size()) break;
                c = s[at++];
                switch (c) {
                    case 'n': out += '\n'; break;
                    case 't': out += '\t'; break;
                    case 'r': out += '\r'; break;
                    case 'b': out += '\b'; break;
                    case 'f': out += '\f'; break;
                    case 'u': {  // basic plane only: enough for our own files
                        const unsigned cp = std::strtoul(s.substr(at, 4).c_str(), nullptr, 16);
                        at += 4;
                        if (cp < 0x80) out += static_cast<char>(cp);
                        else if (cp < 0x800) {
                            out += static_cast<char>(0xC0 | (cp >> 6));
                            out += static_cast<char>(0x80 | (cp & 0x3F));
                        } else {
                            out += static_cast<char>(0xE0 | (cp >> 12));
                            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                            out += static_cast<char>(0x80 | (cp & 0x3F));
                        }
                        break;
                    }
                    default: out += c;
                }
            } else {
                out += c;
            }
        }
        expect(s, at, "\"");
        return out;
    }
    static Json parse_value(const std::string& s, size_t& at) {
        skip_space(s, at);
        if (at >= s.size()) throw Error("JSON: unexpected end");
        Json v;
        const char c = s[at];
        if (c == '{') {
            v.kind = Object;
            ++at;
            skip_space(s, at);
            if (s[at] == '}') return ++at, v;
            while (true) {
                skip_space(s, at);
                std::string key = parse_string(s, at);
                skip_space(s, at);
                expect(s, at, ":");
                v.object[key] = parse_value(s, at);
                skip_space(s, at);
                if (s[at] == ',') { ++at; continue; }
                expect(s, at, "}");
                return v;
            }
        }
        if (c == '[') {
            v.kind = Array;
            ++at;
            skip_space(s, at);
            if (s[at] == ']') return ++at, v;
            while (true) {
                v.array.push_back(parse_value(s, at));
                skip_space(s, at);
                if (s[at] == ',') { ++at; continue; }
                expect(s, at, "]");
                return v;
            }
        }
        if (c == '"') {
            v.kind = String;
            v.string = parse_string(s, at);
            return v;
        }
        if (s.compare(at, 4, "true") == 0) { at += 4; v.kind = Bool; v.boolean = true; return v; }
        if (s.compare(at, 5, "false") == 0) { at += 5; v.kind = Bool; return v; }
        if (s.compare(at, 4, "null") == 0) { at += 4; return v; }
        if (s.compare(at, 3, "NaN") == 0) { at += 3; v.kind = Number; v.number = std::nan(""); return v; }
        char* end = nullptr;
        v.number = std::strtod(s.c_str() + at, &end);
        if (end == s.c_str() + at) throw Error("JSON: unexpected character at offset " + std::to_string(at));
        at = end - s.c_str();
        v.kind = Number;
        return v;
    }
};

}  // namespace gpt
