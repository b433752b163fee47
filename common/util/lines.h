// The lines of a text held in memory, one at a time: "\n" ends a line, a "\r" before it is
// dropped (files written on Windows), and a last line without "\n" is a line too.
#pragma once
#include <string_view>

namespace gpt {

// The line that starts at `at`, into `line`; `at` moves past it. False when nothing is left.
inline bool next_line(std::string_view text, size_t& at, std::string_view& line) {
    if (at >= text.size()) return false;
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    line = text.substr(at, end - at);
    at = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return true;
}

}  // namespace gpt
