// FNV-1a, 32 bit: a simple checksum for checkpoints, easy to recompute in any language.
#pragma once
#include <cstddef>
#include <cstdint>

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

}  // namespace gpt
