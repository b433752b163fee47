// Numbers for people: "1234567" -> "1,234,567" (token and parameter counts read better grouped).
#pragma once
#include <cstdint>
#include <string>

namespace gpt {

inline std::string with_commas(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n);
    for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
    return n < 0 ? "-" + digits : digits;
}

}  // namespace gpt
