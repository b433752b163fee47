// FNV-1a, 32 bit: a simple checksum for checkpoints, easy to recompute in any language.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace gpt {

constexpr uint32_t kFnvOffset = 2166136261u;

inline uint32_t fnv1a(const void* data, size_t n, uint32_t hash = kFnvOffset) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        hash ^= bytes[i];
        hash *= 16777619u;
    }
    return hash;
}

// FNV-1a's step over 64-bit words instead of bytes: eight times fewer multiplications, for a
// fingerprint of hundreds of megabytes (processes compare their weights with it), not a file
// format.
inline uint64_t fingerprint64(const void* data, size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    uint64_t hash = 14695981039346656037ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        std::memcpy(&word, bytes + i, 8);
        hash = (hash ^ word) * 1099511628211ull;
    }
    for (; i < n; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
    return hash;
}

}  // namespace gpt
