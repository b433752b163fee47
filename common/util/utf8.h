// UTF-8 as the Unicode standard defines it (table 3-7: no overlong forms, no surrogates,
// nothing above U+10FFFF): for the JSON reader, which takes only UTF-8 text, and for text that
// must be printed or logged whole although it may hold any bytes (a sample that stops inside a
// character).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace gpt {

// Appends code point cp as UTF-8.
inline void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// The length in bytes of the well-formed character that starts at s[i] (i < s.size()), or 0 if
// the bytes there are not one.
inline int utf8_length_at(std::string_view s, size_t i) {
    const auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
    const unsigned b0 = byte(i);
    if (b0 < 0x80) return 1;
    int len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;  // else overlong
        if (b0 == 0xED) hi = 0x9F;  // else a surrogate
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;  // else overlong
        if (b0 == 0xF4) hi = 0x8F;  // else above U+10FFFF
    }
    if (len == 0 || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (int k = 2; k < len; ++k)
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
    return len;
}

// The offset of the first byte that does not belong to a well-formed character, or s.size().
inline size_t first_invalid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const int len = utf8_length_at(s, i);
        if (len == 0) return i;
        i += len;
    }
    return s.size();
}

// s with each byte that does not belong to a well-formed character replaced by U+FFFD.
inline std::string sanitize_utf8(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        const int len = utf8_length_at(s, i);
        if (len > 0) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

}  // namespace gpt
