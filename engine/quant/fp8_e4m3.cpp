#include "engine/quant/fp8_e4m3.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace dq {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float DecodeE4M3(uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 0x7;
  float mag;
  if (e == 0xF && m == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<float>(m), -9);
  } else {
    mag = std::ldexp(static_cast<float>(8 + m), e - 10);
  }
  return (code & 0x80) ? -mag : mag;
}

// All 256 decodings, built once: decoding sits in every dequantization inner loop.
const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = DecodeE4M3(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float E4M3ToFloat(uint8_t code) { return E4M3Table()[code]; }

uint8_t FloatToE4M3(float f) {
  const uint32_t u = Bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4M3NaN;
  if (a >= Bits(kE4M3Max)) return sign | 0x7E;
  if (a < Bits(0x1p-6f)) {
    // Subnormal range: the code is |f| / 2^-9 rounded to an integer 0..8; 8 is exactly the
    // smallest normal's code, so rounding up across the boundary needs no special case.
    // |f| * 512 is exact (a power-of-two scaling of a value far from fp32's limits), and
    // nearbyint rounds half to even in the default rounding mode.
    const float q = std::nearbyint(std::fabs(f) * 512.0f);
    return sign | static_cast<uint8_t>(q);
  }
  // Normal range: drop fp32's 20 low mantissa bits with round-half-even on the raw bits (a
  // mantissa carry rolls into the exponent, which is the correct next value), then rebias
  // the exponent from 127 to 7. The guard above keeps the result <= 0x7E.
  const uint32_t rounded = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  return sign | static_cast<uint8_t>(rounded - ((127u - 7u) << 3));
}

float E2M1ToFloat(uint8_t nibble) {
  const float mag = kE2M1Values[nibble & 0x7];
  return (nibble & 0x8) ? -mag : mag;
}

uint8_t FloatToE2M1(float f) {
  if (std::isnan(f)) return 0;
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  const float a = std::fabs(f);
  // Each bound is a midpoint between two neighbours; `<=` sends the tie down (to the even
  // code), `<` sends it up (the upper neighbour is the even one).
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

}  // namespace dq
