// Element types of tensors, and the scalar conversions every backend shares.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace dq {

// Types a weight or activation tensor can hold. Block types store `block_elems()` values in
// `block_bytes()` bytes (the GGUF/ggml layouts, bit-exact).
enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI32,
  kI16,
  kU8,
  kI8,
  kF8E4M3,  // OCP FP8 E4M3 (fn: no infinities, 0x7f/0xff are NaN, max 448)
  kQ4_0,    // ggml: fp16 d, 16 bytes of nibbles; x = (q - 8) * d, 32 values
  kQ4_1,    // ggml: fp16 d, fp16 m, 16 bytes of nibbles; x = q * d + m, 32 values
  kQ8_0,    // ggml: fp16 d, 32 int8; x = q * d, 32 values
  // More ggml block types; engine/quant/ggml_kquants.h documents their layouts.
  kQ5_0,     // 32 values in 22 bytes
  kQ5_1,     // 32 values in 24 bytes
  kQ2_K,     // 256 values in 84 bytes
  kQ3_K,     // 256 values in 110 bytes
  kQ4_K,     // 256 values in 144 bytes
  kQ5_K,     // 256 values in 176 bytes
  kQ6_K,     // 256 values in 210 bytes
  kIQ2_XXS,  // 256 values in 66 bytes
  kIQ3_XXS,  // 256 values in 98 bytes
  kIQ4_NL,   // 32 values in 18 bytes
  kIQ4_XS,   // 256 values in 136 bytes
  kIQ2_XS,   // 256 values in 74 bytes
  kIQ2_S,    // 256 values in 82 bytes
  kIQ3_S,    // 256 values in 110 bytes
  kIQ1_S,    // 256 values in 50 bytes
  kIQ1_M,    // 256 values in 56 bytes
};

const char* DTypeName(DType t);
// Values per block (1 for scalar types).
int64_t DTypeBlockElems(DType t);
// Bytes per block (the element size for scalar types).
int64_t DTypeBlockBytes(DType t);
// Bytes for `n` elements; `n` must be a multiple of the block size.
inline int64_t DTypeRowBytes(DType t, int64_t n) {
  return n / DTypeBlockElems(t) * DTypeBlockBytes(t);
}

// IEEE half -> float, exact.
float F16ToF32(uint16_t h);
// float -> IEEE half, round to nearest even, overflow to inf.
uint16_t F32ToF16(float f);

// bfloat16 -> float, exact.
inline float BF16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// float -> bfloat16, round to nearest even; NaN stays NaN.
inline uint16_t F32ToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace dq
