// Non-uniform lookup-table weight-only schemes "lut3" and "lut2" (the reference paper's grids).
//
// Grids (levels in ascending order, as fp32 literals):
//   lut3 (8 levels): -4.7038, -2.8698, -1.3696, 0, 1.2204, 2.5285, 4.0473, 6
//   lut2 (4 levels): -3.6517, 0, 2.5227, 6
// Both are lopsided towards +6: a block is scaled so that its largest-magnitude weight lands on
// +6, whatever its sign, and the rest of the block fills the grid below it.
//
// Numerics (the CPU reference; every backend must match it bit for bit). A per-tensor FP32
// global scale puts the block scales in E4M3's normal range whatever the weights' magnitude,
// as NVFP4 does (without it, sigma ~0.02 weights give block scales ~0.01, below E4M3's smallest
// normal 2^-6, and the relative error grows as weights shrink). Every step is in fp32:
//   amax  = the largest |w| of the matrix, or QuantizeOptions::shared_amax when > 0 (q/k/v and
//           gate/up share one global scale; it must be finite and >= the matrix's own amax).
//   G     = (1 / max(amax, FLT_MIN)) * 2688 (2688 = 6 * 448; two fp32 roundings, exactly as the
//           nvfp4 scheme computes it); a non-finite G (all-zero or near-zero tensor) becomes 1.
//           G is the RECIPROCAL of the paper's global scale amax / (6 * 448), the
//           compressed-tensors convention that nvfp4 also follows.
//   Each row is cut into blocks of 16 consecutive inputs (in % 16 == 0). Per block:
//     a     = w[j*], j* = the first index with the largest |w| (ties: lowest index)
//     sbyte = FloatToE4M3(G * (a / 6.0f))  (E4M3 round-to-nearest-even, saturating at +-448;
//                                          the scale is SIGNED, negative when a < 0, so that
//                                          w[j*] / e is about +6)
//     e     = E4M3ToFloat(sbyte) / G       (the effective block step, one fp32 division; the
//                                          paper's e4m3(scale) * global)
//     code  = the nearest level to x = w / e (fp32 division), found as the number of midpoints
//             m_i = 0.5f * (L[i] + L[i + 1]) (fp32) with x > m_i; so x exactly on a midpoint
//             takes the lower index, and x beyond either end takes the end level.
//     w'    = L[code] * e                  (one fp32 product)
//   Zero blocks (a == 0), and blocks whose scale underflows E4M3 (|G * a / 6| rounds to 0, i.e.
//   |a| <= 6 * 2^-10 / G, about amax * 2.2e-6), store sbyte 0x00 and every code at the 0 level,
//   so w' = 0 and no NaN. Non-finite weights are an error.
//   Bound: with r = |a / 6| / |e| (the scale's rounding factor), x lies in [-6r, 6r] and
//   |w - w'| <= |e| * max(largest gap / 2, L[0] + 6r, 6r - 6). A block scale is an E4M3 normal
//   whenever |a| >= amax * 6 * 2^-6 / 2688 (about amax / 28672), and then |r - 1| <= 1/15, so
//   the error relative to the block's max |a| does not depend on the weights' magnitude: at
//   most 0.2651 |a| for lut3 and 0.4295 |a| for lut2 (both set by the tail term at r = 16/15). The
//   tail term L[0] + 6r matters: a weight near -|a| maps near -6, below the lowest level (-4.7038 /
//   -3.6517), as the paper's one-sided grid accepts.
//
// Stored components (row-major, compressed-tensors naming):
//   "weight_packed"       U8 [out, in * bits / 8]  LSB-first bit stream per row, element i at
//             stream bits [i * bits, (i + 1) * bits), stream bit k = bit (k % 8) of byte k / 8
//             (lut2: 4 codes per byte, element 0 in bits 0-1; lut3: 8 codes per 3 bytes, codes
//             straddle bytes). Same packing as the int schemes (PackBits in int_codec.h).
//   "weight_scale"        F8_E4M3 [out, in / 16]  the signed block scales (sbyte above).
//   "weight_global_scale" F32 [1]  G = 6 * 448 / amax, the reciprocal of the paper's global
//             scale; dequantization DIVIDES by it (same convention, same value for the same
//             amax, as nvfp4's component of that name). A scalar [] is read the same way. It
//             must be positive and finite.
// BitsPerWeight = bits + 8 / 16 + 32 / (out * in): lut3 3.5 and lut2 2.5 plus the global scale
// (lut3 on a [1, 16] matrix: 5.5 bits).
#pragma once

#include <cstdint>

namespace dq {

class WeightCodec;
// The codec for lut<bits>, bits 2 or 3; nullptr otherwise.
const WeightCodec* LutCodec(int bits);

inline constexpr int kLutBlock = 16;
inline constexpr float kLut3Levels[8] = {-4.7038f, -2.8698f, -1.3696f, 0.0f,
                                         1.2204f,  2.5285f,  4.0473f,  6.0f};
inline constexpr float kLut2Levels[4] = {-3.6517f, 0.0f, 2.5227f, 6.0f};

// The grid for `bits` (2 or 3), 2^bits levels ascending; nullptr otherwise.
const float* LutLevels(int bits);
// Index of the level of lutN's grid nearest to `x` (ties and the rules above).
uint8_t LutNearestCode(float x, int bits);
// The stored global scale G for a tensor whose largest |w| is `amax` (see above; equal to
// nvfp4's weight_global_scale for the same amax).
float LutGlobalScale(float amax);
// Quantizes one block of 16 finite weights under the stored global scale `global` (G above):
// returns the E4M3 scale byte and writes 16 codes.
uint8_t QuantizeLutBlock(const float* w, int bits, float global, uint8_t* codes);

}  // namespace dq
