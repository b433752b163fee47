// bf16 on the host, without CUDA: the top 16 bits of an fp32. For files that store bf16 (llm.c
// model files, safetensors) and for tests that predict what the GPU's __float2bfloat16 gives.
// Also IEEE half precision (fp16), read only: safetensors files may hold it.
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

// Exact: every fp16 is an fp32. 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
inline float f16_bits_to_float(uint16_t half) {
    const uint32_t sign = uint32_t(half & 0x8000u) << 16;
    const uint32_t exponent = (half >> 10) & 0x1Fu, mantissa = half & 0x3FFu;
    uint32_t bits;
    if (exponent == 0x1F) {
        bits = sign | 0x7F800000u | (mantissa << 13);  // infinity or NaN
    } else if (exponent != 0) {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    } else {
        // Zero or subnormal: mantissa x 2^-24, exact in fp32.
        float x = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
        std::memcpy(&bits, &x, sizeof(bits));
        bits |= sign;
    }
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
}

}  // namespace gpt
