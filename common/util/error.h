// One exception type for every user-facing failure: a one-line message that names the file,
// option or value at fault. main() prints it as "error: <message>" and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>

namespace gpt {

struct Error : std::runtime_error {
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace gpt
