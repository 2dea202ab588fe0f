// ggml's 5-bit, k-quant and i-quant block types: layouts and the per-type kernels that
// engine/quant/ggml_blocks.cpp dispatches to (internal; use DequantizeRow / DotRow).
//
// All fields are little-endian and packed; "fp16" is an IEEE half. Every dequantized value is
// computed in fp32 with exactly ggml's (and gguf-py's) operations and rounding order; a
// "-" or "+" after a product means the product is rounded to fp32 first (no FMA).
//
// 32-value blocks (element j = 0..31):
//   Q5_0 (22 bytes): fp16 d; u32 qh; 16 bytes qs. q = (nibble j of qs) | (bit j of qh) << 4,
//     where nibble j is the low nibble of qs[j] for j < 16 and the high nibble of qs[j - 16]
//     otherwise (as Q4_0). x = (q - 16) * d.
//   Q5_1 (24 bytes): fp16 d; fp16 m; u32 qh; 16 bytes qs (as Q5_0). x = q * d + m.
//   IQ4_NL (18 bytes): fp16 d; 16 bytes qs (nibbles as Q4_0). x = d * kvalues[nibble], with
//     16 fixed non-linear levels kvalues (ggml_iq_tables.h).
//
// 256-value "super-blocks" (element e = 0..255), split into sub-blocks with their own scales:
//   Q2_K (84 bytes): u8 scales[16]; u8 qs[64]; fp16 d; fp16 dmin. Element e = 128h + 32j + l
//     (h < 2, j < 4, l < 32) has q = (qs[32h + l] >> 2j) & 3 and sub-block s = e / 16, whose
//     byte scales[s] holds the scale (low nibble) and min (high nibble).
//     x = (d * sc) * q - (dmin * mn).
//   Q3_K (110 bytes): u8 hmask[32]; u8 qs[64]; u8 scales[12]; fp16 d. Element
//     e = 128h + 32j + l has low bits (qs[32h + l] >> 2j) & 3 and high bit
//     (hmask[l] >> (4h + j)) & 1; q = low - (high ? 0 : 4), in -4..3. Sixteen 6-bit scales,
//     s = e / 16: low 4 bits from scales[s] & 15 (s < 8) or scales[s - 8] >> 4 (s >= 8), top
//     2 bits from (scales[8 + s % 4] >> (2 * (s / 4))) & 3. x = (d * (scale - 32)) * q.
//   Q4_K (144 bytes): fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128]. Eight 32-value sub-blocks
//     with 6-bit scale sc and min mn (KScaleMin below). Element e = 64c + 32k + l (c < 4,
//     k < 2) is nibble k (0: low, 1: high) of qs[32c + l], in sub-block 2c + k.
//     x = (d * sc) * q - (dmin * mn).
//   Q5_K (176 bytes): fp16 d; fp16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]. As Q4_K, with
//     a fifth bit (qh[l] >> (2c + k)) & 1 as bit 4 of q.
//   Q6_K (210 bytes): u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d. Element
//     e = 128h + 32j + l (h < 2, j < 4, l < 32): low 4 bits are the nibble j / 2 of
//     ql[64h + 32(j % 2) + l], high 2 bits are (qh[32h + l] >> 2j) & 3; q = that - 32.
//     x = (d * scales[e / 16]) * q.
//   IQ2_XXS (66 bytes): fp16 d; 8 groups of 32 values, each two u32 (a, b) at 2 + 8g.
//     Byte i of a (i < 4) indexes kIq2xxsGrid, 8 magnitudes for elements 32g + 8i .. + 7;
//     bits 7i .. 7i + 6 of b index kIqSigns (bit j set: element 8i + j is negated);
//     b >> 28 is the 4-bit group scale. x = (d * (0.5 + (b >> 28)) * 0.25) * grid * sign.
//   IQ3_XXS (98 bytes): fp16 d; u8 qs[64]; u32 signs[8]. Group g (32 values) uses qs[8g + m]
//     (m < 8) as an index into kIq3xxsGrid, 4 magnitudes for elements 32g + 4m .. + 3; signs
//     as IQ2_XXS's b with signs[g]. x = (d * (0.5 + (signs[g] >> 28)) * 0.5) * grid * sign.
//   IQ4_XS (136 bytes): fp16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]. Sub-block s (32
//     values) has the 6-bit scale (nibble s of scales_l) | ((scales_h >> 2s) & 3) << 4, less 32,
//     and IQ4_NL's nibble layout in qs[16s ..]. x = (d * scale) * kIq4nlValues[nibble].
//   IQ2_XS (74 bytes): fp16 d; u16 qs[32]; u8 scales[8]. Code i covers elements 8i .. + 7:
//     kIq2xsGrid[qs & 511] magnitudes, kIqSigns[qs >> 9] signs; group scale nibble i / 2 of
//     scales. x = (d * (0.5 + scale) * 0.25) * grid * sign.
//   IQ2_S (82 bytes): fp16 d; u8 qs[32]; u8 signs[32]; u8 qh[8]; u8 scales[8]. Code i indexes
//     kIq2sGrid with qs[i] | ((qh[i / 4] >> 2(i % 4)) & 3) << 8, signs[i] are its 8 sign bits;
//     scales as IQ2_XS.
//   IQ3_S (110 bytes): fp16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]. Code i covers
//     elements 4i .. + 3: kIq3sGrid[qs[i] | ((qh[i / 8] >> (i % 8)) & 1) << 8], sign bit of
//     element e is bit e % 8 of signs[e / 8]; the 32-value group i / 8 scales by
//     d * (1 + 2 * nibble). x = (d * (1 + 2 * scale)) * grid * sign.
//   IQ1_S (50 bytes): fp16 d; u8 qs[32]; u16 qh[8]. Group g (32 values, 4 codes) takes from
//     qh[g] its scale (qh >> 12) & 7, its delta sign (bit 15: -0.125, else +0.125) and each
//     code k's top index bits (qh >> 3k) & 7; code 4g + k indexes kIq1Grid (values -1, 0, 1) with
//     qs[4g + k] | bits << 8. x = (d * (2 * scale + 1)) * (grid + delta).
//   IQ1_M (56 bytes): u8 qs[32]; u8 qh[16]; u16 scales[4]. The fp16 d is the four words' top
//     nibbles (word w's at bits 4w); code i's 3-bit scale is (scales[i / 8] >> 3((i / 2) % 4))
//     & 7, its nibble (qh[i / 2] >> 4(i % 2)) & 15 gives the top index bits (low 3) and the delta
//     sign (bit 3). x as IQ1_S.
#pragma once

#include <cstdint>

#include "engine/quant/ggml_simd.h"

namespace dq::ggml {

constexpr int kQK = 32;    // values per 32-value block
constexpr int kQKK = 256;  // values per k-quant / i-quant super-block

// Sub-block j (0..7) of a Q4_K / Q5_K block: the 6-bit scale and min packed in the 12 bytes
// `s`. The first four of each sit in the low 6 bits of bytes 0..3 (scales) and 4..7 (mins);
// the last four put their low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits
// of bytes 0..7.
inline void KScaleMin(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sub-block s (0..15) of a Q3_K block: its 6-bit scale minus 32, from the 12 bytes `s`.
inline int Q3KScale(const uint8_t* sc, int s) {
  const int low = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
  const int high = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
  return (low | high << 4) - 32;
}

// Portable, bit-exact references: dequantize `nblocks` whole blocks from `src` to `dst`.
void DequantQ5_0Ref(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ5_1Ref(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ4_NLRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ2_KRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ3_KRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ4_KRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ5_KRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ6_KRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ2_XXSRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ3_XXSRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ4_XSRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ2_XSRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ2_SRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ3_SRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ1_SRef(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ1_MRef(const uint8_t* src, float* dst, int64_t nblocks);

// The reference for any type above; false if `t` is not one of them. Tests use it to check the
// portable code on machines where DequantizeRow takes the vector path.
bool DequantizeBlocksRef(DType t, const uint8_t* src, float* dst, int64_t nblocks);

#ifdef DQ_GGML_AVX2
// AVX2 kernels: Dequant* are bit-identical to the references; Dot* return
// sum_i dequant(row)[i] * x[i] accumulated in fp32.
void DequantQ5_0Avx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ5_1Avx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ4_NLAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ2_KAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ3_KAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ4_KAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ5_KAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantQ6_KAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ2_XXSAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ3_XXSAvx2(const uint8_t* src, float* dst, int64_t nblocks);
void DequantIQ4_XSAvx2(const uint8_t* src, float* dst, int64_t nblocks);
float DotQ5_0Avx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ5_1Avx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotIQ4_NLAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ2_KAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ3_KAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ4_KAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ5_KAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotQ6_KAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotIQ2_XXSAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotIQ3_XXSAvx2(const uint8_t* row, const float* x, int64_t nblocks);
float DotIQ4_XSAvx2(const uint8_t* row, const float* x, int64_t nblocks);
#endif

}  // namespace dq::ggml
