#include "common/dtype.h"

namespace dq {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI16:
      return "i16";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
    case DType::kF8E4M3:
      return "f8_e4m3";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kQ2_K:
      return "q2_k";
    case DType::kQ3_K:
      return "q3_k";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kIQ2_XXS:
      return "iq2_xxs";
    case DType::kIQ3_XXS:
      return "iq3_xxs";
    case DType::kIQ4_NL:
      return "iq4_nl";
    case DType::kIQ4_XS:
      return "iq4_xs";
    case DType::kIQ2_XS:
      return "iq2_xs";
    case DType::kIQ2_S:
      return "iq2_s";
    case DType::kIQ3_S:
      return "iq3_s";
    case DType::kIQ1_S:
      return "iq1_s";
    case DType::kIQ1_M:
      return "iq1_m";
  }
  return "?";
}

int64_t DTypeBlockElems(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL:
      return 32;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ2_XXS:
    case DType::kIQ3_XXS:
    case DType::kIQ4_XS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
      return 256;
    default:
      return 1;
  }
}

int64_t DTypeBlockBytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI16:
      return 2;
    case DType::kU8:
    case DType::kI8:
    case DType::kF8E4M3:
      return 1;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_1:
      return 20;
    case DType::kQ8_0:
      return 34;
    case DType::kQ5_0:
      return 22;
    case DType::kQ5_1:
      return 24;
    case DType::kQ2_K:
      return 84;
    case DType::kQ3_K:
      return 110;
    case DType::kQ4_K:
      return 144;
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
    case DType::kIQ2_XXS:
      return 66;
    case DType::kIQ3_XXS:
      return 98;
    case DType::kIQ4_NL:
      return 18;
    case DType::kIQ4_XS:
      return 136;
    case DType::kIQ2_XS:
      return 74;
    case DType::kIQ2_S:
      return 82;
    case DType::kIQ3_S:
      return 110;
    case DType::kIQ1_S:
      return 50;
    case DType::kIQ1_M:
      return 56;
  }
  return 0;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below the smallest normal half
    if (abs < 0x33000000u) return sign;           // rounds to zero
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (112 - e)
    uint32_t half = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs >> 23) - 112) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

}  // namespace dq
