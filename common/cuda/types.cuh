// Element types of activations and their conversions. Kernels are templates on the element
// type T and compute in float: load with to_float, store with from_float<T>.
#pragma once
#include <cuda_bf16.h>
#include <library_types.h>

#include <cstdint>

#include "train/precision.h"

namespace gpt {

using bf16 = __nv_bfloat16;

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(bf16 x) { return __bfloat162float(x); }

template <class T>
__host__ __device__ inline T from_float(float x);
template <>
__host__ __device__ inline float from_float<float>(float x) { return x; }
template <>
__host__ __device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }  // round to nearest

template <>
inline const char* act_type_name<bf16>() { return "bf16"; }
template <>
inline constexpr bool is_bf16_v<bf16> = true;

// kVec elements that move as one access: 16 bytes (ld.global.v4) when kVec · sizeof(T) == 16.
// Row-wise kernels (stage 04's LayerNorm and classifier) read and write their rows in these.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
    T v[kVec];
};

// Pack i of a row; the row must start on a multiple of sizeof(P) bytes (the caller checks).
template <class P, class T>
__device__ inline P load_pack(const T* row, int i) {
    return reinterpret_cast<const P*>(row)[i];
}
template <class P, class T>
__device__ inline void store_pack(T* row, int i, const P& p) {
    reinterpret_cast<P*>(row)[i] = p;
}

// Whether an array may be read and written in 16-byte packs from p on. (A null pointer, an
// operand a kernel does not use, counts as aligned.)
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The cuBLAS name of each type.
template <class T>
constexpr cudaDataType_t cuda_type();
template <>
constexpr cudaDataType_t cuda_type<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t cuda_type<bf16>() { return CUDA_R_16BF; }

}  // namespace gpt
