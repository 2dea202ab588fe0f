// Exact scalar conversions for the two small float formats behind the fp8 and nvfp4 schemes.
//
// E4M3 (OCP FP8 "E4M3FN", torch.float8_e4m3fn): sign, 4 exponent bits (bias 7), 3 mantissa bits.
//   exponent field 1..15: (-1)^s * 2^(e-7) * (1 + m/8); field 0: (-1)^s * m * 2^-9 (subnormals).
//   No infinities; 0x7F and 0xFF (all exponent and mantissa bits set) are NaN, so the largest
//   finite magnitude is 0x7E = 448. The smallest normal is 2^-6, the smallest subnormal 2^-9.
//   The NVFP4 block scale ("UE4M3") is this format with the sign bit clear.
//
// E2M1 (OCP FP4): a nibble with sign in bit 3, 2 exponent bits (bias 1), 1 mantissa bit.
//   Codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8..15 their negatives (8 is -0).
//   No NaN and no infinity.
//
// Encoding rounds to nearest with ties to the value whose lowest mantissa bit is 0 ("even"),
// and saturates: a magnitude beyond the largest finite value (infinity included) becomes that
// value, because a scaled quantizer should clip, not produce a non-number.
#pragma once

#include <cstdint>

namespace dq {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr uint8_t kE4M3NaN = 0x7F;

// Decodes an E4M3 byte exactly (NaN for 0x7F/0xFF, -0.0f for 0x80).
float E4M3ToFloat(uint8_t code);

// Encodes `f` to E4M3: round to nearest even, |f| >= 448 (and +-inf) saturates to +-448,
// NaN -> 0x7F. The sign of zero is kept (-0.0f -> 0x80; a negative value that rounds to zero
// is 0x80 too, as a float cast would give).
uint8_t FloatToE4M3(float f);

// Decodes the low 4 bits of `nibble` as E2M1 (upper bits are ignored).
float E2M1ToFloat(uint8_t nibble);

// Encodes `f` to an E2M1 nibble (0..15). Round to nearest, ties to the even mantissa bit: the
// ties are exactly 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4
// (the same thresholds as compressed-tensors' cast_to_fp4). |f| > 6 and +-inf saturate to
// +-6. NaN -> 0 (+0): FP4 has no NaN, and a zero is the least harmful stand-in. The sign bit
// follows f's sign bit, so -0.0f and negative values that round to zero give 8 (-0).
uint8_t FloatToE2M1(float f);

}  // namespace dq
