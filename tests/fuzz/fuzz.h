// What every fuzz target shares: the input as a file (the shard and checkpoint readers take a
// path), and the rule that a rejected input gives a one-line gpt::Error (docs/formats.md).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "util/error.h"

namespace fuzz {

// This process's scratch folder, one per process (ctest runs targets side by side): an input is
// alone there, so that no file of someone else's beside it (a config.json, which the safetensors
// reader looks for next to a model) changes what loads. Removed when libFuzzer exits normally;
// after a finding it stays, with the input that was being read.
inline const std::filesystem::path& scratch() {
    // Never destroyed, so that the exit handler can still use it.
    static const std::filesystem::path* const dir = [] {
        const auto* d = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                                  ("gpt_fuzz_" + std::to_string(getpid())));
        std::filesystem::create_directories(*d);
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratch(), ec);
        });
        return d;
    }();
    return *dir;
}

// Writes the input to this process's scratch file and returns its path.
inline std::string input_file(const uint8_t* data, size_t size) {
    static const std::string path = (scratch() / "input.bin").string();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
        std::perror(path.c_str());
        std::abort();
    }
    return path;
}

// A finding for libFuzzer: it stops and keeps the input.
[[noreturn]] inline void fail(const char* what, const std::string& detail = "") {
    std::fprintf(stderr, "fuzz finding: %s%s%s\n", what, detail.empty() ? "" : ": ", detail.c_str());
    std::abort();
}

// The user sees "error: <message>" on one line: a message must not break it.
inline void expect_one_line(const gpt::Error& e) {
    if (std::strchr(e.what(), '\n') || std::strchr(e.what(), '\r')) fail("error message of more than one line", e.what());
}

}  // namespace fuzz
