// Uniform integer weight-only schemes "int2", "int3", "int4", "int8" (asymmetric, GPTQ-style).
//
// Numerics (the CPU reference; every backend must match it bit for bit):
//   The [out, in] matrix is cut into groups of G = 32, 64 or 128 consecutive inputs of one row
//   (QuantizeOptions::group_size; 0 means 128). With qmax = 2^bits - 1, per group:
//     lo = min(min(w), 0), hi = max(max(w), 0)   (the range always holds 0, as GPTQ's Quantizer
//                                                  does, so the clamped integer zero point can
//                                                  always place 0 and every w on the grid)
//     scale = f16_rne((hi - lo) / qmax), computed in fp32; if qmax * scale < hi - lo the f16
//             scale is bumped to the next f16 up, so the grid spans the whole group and the
//             error bound below holds after the f16 rounding. A scale that would underflow to
//             0 becomes the smallest f16 subnormal (2^-24); one above 65504 is an error.
//     z     = clamp(nearbyint(-lo / scale), 0, qmax)            (integer zero point)
//     q     = clamp(nearbyint(w / scale) + z, 0, qmax)          (w / scale in fp32)
//     w'    = float(q - z) * scale                              (one fp32 product; exact,
//                                                                since |q - z| < 2^8 and the
//                                                                scale has 11 significant bits)
//   nearbyint runs in the default rounding mode: round to nearest, ties to even.
//   Bound: |w - w'| <= scale / 2 (plus the fp32 rounding of w / scale at exact ties).
//   Degenerate groups (max(w) == min(w) == c): c == 0 (or |c| so small that f16 rounds it to 0)
//   stores scale 1, z 0, q 0 (w' = 0);
//   c != 0 stores scale f16_rne(|c|) with q - z = sign(c) (c > 0: z 0, q 1; c < 0: z 1, q 0),
//   so a constant that is representable in f16 is reconstructed exactly.
//   Non-finite weights are an error.
//
// Stored components (row-major):
//   "qweight" U8  [out, ceil(in * bits / 8)]  each row a little-endian, LSB-first bit stream:
//             element i of the row occupies stream bits [i * bits, (i + 1) * bits), where stream
//             bit k is bit (k % 8) of byte k / 8. For 2/4/8 bits this means bits 0..bits-1 of
//             byte 0 hold element 0; for 3 bits codes straddle bytes (element 2 = bits 6,7 of
//             byte 0 and bit 0 of byte 1), 8 elements per 3 bytes.
//   "scales"  F16 [out, in / G]  (IEEE half, as GPTQ/AWQ store them, so their checkpoints
//             import losslessly; the reference dequant uses exactly this stored half)
//   "zeros"   U8  [out, in / G]  the integer zero point z. Quantize writes z in [0, qmax];
//             GPTQ v1 imports may hold z = 2^bits (see gptq_import.h), so consumers must read
//             the full byte, never just `bits` of it.
// BitsPerWeight = bits + (16 + 8) / G (e.g. int4 G128: 4.1875).
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace dq {

class WeightCodec;
// The codec for int<bits>, bits in {2, 3, 4, 8}; nullptr for other widths.
const WeightCodec* IntCodec(int bits);

// Group sizes the int schemes accept.
inline constexpr int kIntGroupSizes[] = {32, 64, 128};
inline constexpr int kIntDefaultGroupSize = 128;

// One group's quantization parameters, as stored.
struct IntGroupParams {
  uint16_t scale_f16 = 0;  // the stored half
  float scale = 0.0f;      // F16ToF32(scale_f16)
  uint8_t zero = 0;
};

// Chooses scale and zero point for the `n` finite weights at `w` (the rules above).
// Returns false when the scale would overflow f16.
bool ChooseIntGroupParams(const float* w, int64_t n, int bits, IntGroupParams* params);

// The code for `w` under `params`: clamp(nearbyint(w / scale) + zero, 0, 2^bits - 1).
uint8_t QuantizeIntValue(float w, const IntGroupParams& params, int bits);

// Writes codes[0..n) (each < 2^bits, bits in 1..8) as an LSB-first bit stream to `dst`, which
// must hold ceil(n * bits / 8) bytes; every byte of it is overwritten (unused high bits 0).
void PackBits(const uint8_t* codes, int64_t n, int bits, uint8_t* dst);
// Reads `n` codes of `bits` bits from the LSB-first bit stream at `src`.
void UnpackBits(const uint8_t* src, int64_t n, int bits, uint8_t* codes);
// Bytes that `n` codes of `bits` bits occupy.
inline int64_t PackedBytes(int64_t n, int bits) { return (n * bits + 7) / 8; }

}  // namespace dq
