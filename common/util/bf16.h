// bf16 on the host, without CUDA: the top 16 bits of an fp32. For files that store bf16 (llm.c
// model files) and for tests that predict what the GPU's __float2bfloat16 gives.
#pragma once
#include <cstdint>
#include <cstring>

namespace gpt {

// The nearest bf16, ties to even (as __float2bfloat16 and PyTorch round). Adding 0x7FFF carries
// into the kept half exactly when the dropped half is above one half; adding the kept half's
// lowest bit as well makes an exact half carry only onto an odd value. (NaN is never passed.)
inline uint16_t float_to_bf16_bits(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// Exact: every bf16 is an fp32.
inline float bf16_bits_to_float(uint16_t half) {
    const uint32_t bits = uint32_t(half) << 16;
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
}

inline float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

}  // namespace gpt
