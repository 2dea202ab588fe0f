// Q5_0, Q5_1, IQ4_NL, IQ4_XS and the IQ2/IQ3 grids (layouts in ggml_kquants.h): portable
// references, and AVX2 kernels for IQ4_NL, IQ4_XS, IQ2_XXS and IQ3_XXS.
#include "engine/quant/ggml_iq_tables.h"
#include "engine/quant/ggml_kquants.h"

namespace dq::ggml {
namespace {

constexpr int kQ5_0Bytes = 22;
constexpr int kQ5_1Bytes = 24;
constexpr int kIQ4_NLBytes = 18;
constexpr int kIQ2_XXSBytes = 66;
constexpr int kIQ3_XXSBytes = 98;
constexpr int kIQ4_XSBytes = 136;
constexpr int kIQ2_XSBytes = 74;
constexpr int kIQ2_SBytes = 82;
constexpr int kIQ3_SBytes = 110;
constexpr int kIQ1_SBytes = 50;
constexpr int kIQ1_MBytes = 56;
constexpr float kIq1Delta = 0.125f;

// Element j of a 32-value block's 16 nibble bytes: low nibbles hold 0..15, high ones 16..31.
inline int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// The magnitude of element j (0..7) of IQ2_XXS grid point `idx`.
inline float Iq2Grid(int idx, int j) {
  return static_cast<float>((kIq2xxsGrid[idx] >> (8 * j)) & 0xFF);
}
inline float Iq3Grid(int idx, int j) {
  return static_cast<float>((kIq3xxsGrid[idx] >> (8 * j)) & 0xFF);
}
inline float GridByte(uint64_t point, int j) {
  return static_cast<float>((point >> (8 * j)) & 0xFF);
}

// The signed 6-bit scale of IQ4_XS sub-block ib (0..7) of `block`: its low nibble in
// scales_l, its top 2 bits in scales_h, less 32.
inline int Iq4XsScale(const uint8_t* block, int ib) {
  const int low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 15;
  return (low | static_cast<int>((LoadU16(block + 2) >> (2 * ib)) & 3) << 4) - 32;
}

// The 4-bit scale of group g from nibble-packed bytes (low nibble first).
inline int Nibble4(const uint8_t* scales, int g) { return (scales[g / 2] >> (4 * (g % 2))) & 15; }

// One group of `n` values from grid magnitudes, its scale and sign bits (bit j: negate j):
// gguf-py's (db * grid) * sign, bit for bit.
inline void GridGroup(float db, uint64_t point, uint32_t signs, int n, float* dst) {
  for (int j = 0; j < n; ++j) {
    const float v = db * GridByte(point, j);
    dst[j] = (signs >> j) & 1 ? -v : v;
  }
}

}  // namespace

void DequantQ5_0Ref(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ5_0Bytes, dst += kQK) {
    const float d = LoadF16(src);
    const uint32_t qh = LoadU32(src + 2);
    for (int j = 0; j < kQK; ++j) {
      const int q = Nibble(src + 6, j) | static_cast<int>((qh >> j) & 1) << 4;
      dst[j] = static_cast<float>(q - 16) * d;
    }
  }
}

void DequantQ5_1Ref(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ5_1Bytes, dst += kQK) {
    const float d = LoadF16(src);
    const float m = LoadF16(src + 2);
    const uint32_t qh = LoadU32(src + 4);
    for (int j = 0; j < kQK; ++j) {
      const int q = Nibble(src + 8, j) | static_cast<int>((qh >> j) & 1) << 4;
      dst[j] = Opaque(static_cast<float>(q) * d) + m;
    }
  }
}

void DequantIQ4_NLRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ4_NLBytes, dst += kQK) {
    const float d = LoadF16(src);
    for (int j = 0; j < kQK; ++j) dst[j] = d * static_cast<float>(kIq4nlValues[Nibble(src + 2, j)]);
  }
}

void DequantIQ2_XXSRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ2_XXSBytes) {
    const float d = LoadF16(src);
    for (int g = 0; g < 8; ++g) {
      const uint32_t grid = LoadU32(src + 2 + 8 * g);
      const uint32_t aux = LoadU32(src + 6 + 8 * g);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
      for (int i = 0; i < 4; ++i, dst += 8) {
        const int idx = static_cast<int>((grid >> (8 * i)) & 0xFF);
        const uint8_t signs = kIqSigns[(aux >> (7 * i)) & 127];
        for (int j = 0; j < 8; ++j) {
          const float v = db * Iq2Grid(idx, j);
          dst[j] = (signs >> j) & 1 ? -v : v;
        }
      }
    }
  }
}

void DequantIQ3_XXSRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ3_XXSBytes) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int g = 0; g < 8; ++g) {
      const uint32_t aux = LoadU32(src + 66 + 4 * g);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int i = 0; i < 4; ++i, dst += 8) {
        const uint8_t signs = kIqSigns[(aux >> (7 * i)) & 127];
        for (int j = 0; j < 8; ++j) {
          const float v = db * Iq3Grid(qs[8 * g + 2 * i + j / 4], j % 4);
          dst[j] = (signs >> j) & 1 ? -v : v;
        }
      }
    }
  }
}

void DequantIQ4_XSRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ4_XSBytes) {
    const float d = LoadF16(src);
    for (int ib = 0; ib < 8; ++ib, dst += kQK) {
      const float dl = d * static_cast<float>(Iq4XsScale(src, ib));
      for (int j = 0; j < kQK; ++j) {
        dst[j] = dl * static_cast<float>(kIq4nlValues[Nibble(src + 8 + 16 * ib, j)]);
      }
    }
  }
}

void DequantIQ2_XSRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ2_XSBytes) {
    const float d = LoadF16(src);
    const uint8_t* scales = src + 66;
    for (int i = 0; i < 32; ++i, dst += 8) {  // 32 u16 codes of 8 values; groups of 16 values
      const uint32_t q = LoadU16(src + 2 + 2 * i);
      const float db = d * (0.5f + static_cast<float>(Nibble4(scales, i / 2))) * 0.25f;
      GridGroup(db, kIq2xsGrid[q & 511], kIqSigns[q >> 9], 8, dst);
    }
  }
}

void DequantIQ2_SRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ2_SBytes) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    const uint8_t* signs = src + 34;
    const uint8_t* qh = src + 66;
    const uint8_t* scales = src + 74;
    for (int i = 0; i < 32; ++i, dst += 8) {
      const int idx = qs[i] | ((qh[i / 4] >> (2 * (i % 4))) & 3) << 8;
      const float db = d * (0.5f + static_cast<float>(Nibble4(scales, i / 2))) * 0.25f;
      GridGroup(db, kIq2sGrid[idx], signs[i], 8, dst);
    }
  }
}

void DequantIQ3_SRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ3_SBytes) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    const uint8_t* qh = src + 66;
    const uint8_t* signs = src + 74;
    const uint8_t* scales = src + 106;
    for (int i = 0; i < 64; ++i, dst += 4) {  // 64 codes of 4 values; groups of 32 values
      const int idx = qs[i] | ((qh[i / 8] >> (i % 8)) & 1) << 8;
      const float db = d * static_cast<float>(1 + 2 * Nibble4(scales, i / 8));
      GridGroup(db, kIq3sGrid[idx], (signs[i / 2] >> (4 * (i % 2))) & 15, 4, dst);
    }
  }
}

namespace {

// 8 values of IQ1 grid point `idx` shifted by `delta`, times dl: gguf-py's dl * (grid + delta).
inline void Iq1Group(float dl, int idx, float delta, float* dst) {
  for (int j = 0; j < 8; ++j) {
    const auto g = static_cast<int8_t>((kIq1Grid[idx] >> (8 * j)) & 0xFF);
    dst[j] = dl * (static_cast<float>(g) + delta);
  }
}

}  // namespace

void DequantIQ1_SRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ1_SBytes) {
    const float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int g = 0; g < 8; ++g) {  // 8 groups of 4 codes (32 values)
      const uint32_t qh = LoadU16(src + 34 + 2 * g);
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) == 0 ? kIq1Delta : -kIq1Delta;
      for (int k = 0; k < 4; ++k, dst += 8) {
        Iq1Group(dl, qs[4 * g + k] | static_cast<int>((qh >> (3 * k)) & 7) << 8, delta, dst);
      }
    }
  }
}

void DequantIQ1_MRef(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ1_MBytes) {
    const uint8_t* qs = src;
    const uint8_t* qh = src + 32;
    uint16_t sc[4];
    for (int i = 0; i < 4; ++i) sc[i] = LoadU16(src + 48 + 2 * i);
    // The fp16 scale is spread over the top nibbles of the four scale words.
    const uint16_t d_bits = static_cast<uint16_t>((sc[0] & 0xF000) >> 12 | (sc[1] & 0xF000) >> 8 |
                                                  (sc[2] & 0xF000) >> 4 | (sc[3] & 0xF000));
    const float d = F16ToF32(d_bits);
    for (int i = 0; i < 32; ++i, dst += 8) {  // code i; 3-bit scale i / 2
      const int s = (sc[i / 8] >> (3 * ((i / 2) % 4))) & 7;
      const float dl = d * static_cast<float>(2 * s + 1);
      const int nib = (qh[i / 2] >> (4 * (i % 2))) & 15;
      Iq1Group(dl, qs[i] | (nib & 7) << 8, (nib & 8) == 0 ? kIq1Delta : -kIq1Delta, dst);
    }
  }
}

#ifdef DQ_GGML_AVX2
namespace {

// The grids as fp32 vectors and the sign bytes as per-lane sign-bit masks, so the AVX2 kernels
// need plain loads instead of byte shuffles (12 KiB, L1-resident).
struct IqVectorTables {
  alignas(32) float iq2[256][8];
  alignas(16) float iq3[256][4];
  alignas(32) uint32_t sign[128][8];
};

constexpr IqVectorTables MakeIqVectorTables() {
  IqVectorTables t{};
  for (int i = 0; i < 256; ++i) {
    for (int j = 0; j < 8; ++j) t.iq2[i][j] = static_cast<float>((kIq2xxsGrid[i] >> (8 * j)) & 255);
    for (int j = 0; j < 4; ++j) t.iq3[i][j] = static_cast<float>((kIq3xxsGrid[i] >> (8 * j)) & 255);
  }
  for (int i = 0; i < 128; ++i) {
    for (int j = 0; j < 8; ++j) t.sign[i][j] = (kIqSigns[i] >> j) & 1 ? 0x80000000u : 0u;
  }
  return t;
}

constexpr IqVectorTables kIqVec = MakeIqVectorTables();

inline __m256 SignMask(uint32_t aux, int i) {
  return _mm256_load_ps(reinterpret_cast<const float*>(kIqVec.sign[(aux >> (7 * i)) & 127]));
}
inline __m256 Iq2Vec(uint32_t grid, int i) {
  return _mm256_load_ps(kIqVec.iq2[(grid >> (8 * i)) & 0xFF]);
}
inline __m256 Iq3Vec(const uint8_t* qs) {
  return _mm256_set_m128(_mm_load_ps(kIqVec.iq3[qs[1]]), _mm_load_ps(kIqVec.iq3[qs[0]]));
}

// The 32 nibbles of a Q4-style block as int32 in element order (0..7, 8..15, 16..23, 24..31).
inline void Nibbles(const uint8_t* qs, __m256i q[4]) {
  const __m256i a = Widen8(qs);
  const __m256i b = Widen8(qs + 8);
  const __m256i mask = _mm256_set1_epi32(15);
  q[0] = _mm256_and_si256(a, mask);
  q[1] = _mm256_and_si256(b, mask);
  q[2] = _mm256_srli_epi32(a, 4);
  q[3] = _mm256_srli_epi32(b, 4);
}

// Adds bit j of `qh` as bit 4 of element j's value.
inline void AddFifthBit(uint32_t qh, __m256i q[4]) {
  const __m256i h = _mm256_set1_epi32(static_cast<int>(qh));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i one = _mm256_set1_epi32(1);
  for (int k = 0; k < 4; ++k) {
    const __m256i bit = _mm256_and_si256(
        _mm256_srlv_epi32(h, _mm256_add_epi32(lane, _mm256_set1_epi32(8 * k))), one);
    q[k] = _mm256_or_si256(q[k], _mm256_slli_epi32(bit, 4));
  }
}

// Q5_0 (kMin false) and Q5_1 (kMin true).
template <bool kDot, bool kMin>
void Q5Rows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  constexpr int bytes = kMin ? kQ5_1Bytes : kQ5_0Bytes;
  constexpr int qh_at = kMin ? 4 : 2;
  __m256i q[4];
  for (int64_t b = 0; b < nblocks; ++b, src += bytes, s.Advance(kQK)) {
    Nibbles(src + qh_at + 4, q);
    AddFifthBit(LoadU32(src + qh_at), q);
    const __m256 d = BroadcastF16(src);
    if constexpr (kMin) {
      const __m256 m = BroadcastF16(src + 2);
      for (int k = 0; k < 4; ++k) {
        s.Put(k, 8 * k, Sink<kDot>::MulAdd(_mm256_cvtepi32_ps(q[k]), d, m));
      }
    } else {
      const __m256i bias = _mm256_set1_epi32(16);
      const __m256 bias_d = _mm256_mul_ps(d, _mm256_set1_ps(16.0f));
      for (int k = 0; k < 4; ++k) s.Put(k, 8 * k, Sink<kDot>::Biased(q[k], bias, d, bias_d));
    }
  }
}

// IQ4_NL's 16 levels as two 8-lane vectors: each nibble picks one; two permutes plus a blend
// on bit 3 look all of them up without leaving registers.
struct Iq4Levels {
  __m256 lo, hi;
  Iq4Levels() {
    alignas(32) float levels[16];
    for (int i = 0; i < 16; ++i) levels[i] = static_cast<float>(kIq4nlValues[i]);
    lo = _mm256_load_ps(levels);
    hi = _mm256_load_ps(levels + 8);
  }
  __m256 operator()(__m256i q) const {
    const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(q, 28));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, q), _mm256_permutevar8x32_ps(hi, q),
                            upper);
  }
};

template <bool kDot>
void IQ4_NLRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  const Iq4Levels level;
  __m256i q[4];
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ4_NLBytes, s.Advance(kQK)) {
    Nibbles(src + 2, q);
    const __m256 d = BroadcastF16(src);
    for (int k = 0; k < 4; ++k) s.Put(k, 8 * k, _mm256_mul_ps(d, level(q[k])));
  }
}

// IQ4_XS: IQ4_NL's nibbles in 32-value sub-blocks, each with its 6-bit scale (d * scale
// rounded once, as the reference does).
template <bool kDot>
void IQ4_XSRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  const Iq4Levels level;
  __m256i q[4];
  for (int64_t b = 0; b < nblocks; ++b, src += kIQ4_XSBytes) {
    const float d = LoadF16(src);
    for (int ib = 0; ib < 8; ++ib, s.Advance(kQK)) {
      const __m256 dl = _mm256_set1_ps(d * static_cast<float>(Iq4XsScale(src, ib)));
      Nibbles(src + 8 + 16 * ib, q);
      for (int k = 0; k < 4; ++k) s.Put(k, 8 * k, _mm256_mul_ps(dl, level(q[k])));
    }
  }
}

// The group scale of an IQ2_XXS (k = 0.25) or IQ3_XXS (k = 0.5) group, rounded as ggml does.
inline __m256 GroupScale(float d, uint32_t aux, float k) {
  return _mm256_set1_ps(d * (0.5f + static_cast<float>(aux >> 28)) * k);
}

void DequantIQ2_XXSBlock(const uint8_t* src, float* dst) {
  const float d = LoadF16(src);
  for (int g = 0; g < 8; ++g, dst += 32) {
    const uint32_t grid = LoadU32(src + 2 + 8 * g);
    const uint32_t aux = LoadU32(src + 6 + 8 * g);
    const __m256 db = GroupScale(d, aux, 0.25f);
    for (int i = 0; i < 4; ++i) {
      const __m256 v = _mm256_mul_ps(db, Iq2Vec(grid, i));
      _mm256_storeu_ps(dst + 8 * i, _mm256_xor_ps(v, SignMask(aux, i)));
    }
  }
}

void DequantIQ3_XXSBlock(const uint8_t* src, float* dst) {
  const float d = LoadF16(src);
  const uint8_t* qs = src + 2;
  for (int g = 0; g < 8; ++g, dst += 32, qs += 8) {
    const uint32_t aux = LoadU32(src + 66 + 4 * g);
    const __m256 db = GroupScale(d, aux, 0.5f);
    for (int i = 0; i < 4; ++i) {
      const __m256 v = _mm256_mul_ps(db, Iq3Vec(qs + 2 * i));
      _mm256_storeu_ps(dst + 8 * i, _mm256_xor_ps(v, SignMask(aux, i)));
    }
  }
}

}  // namespace

void DequantQ5_0Avx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s;
  s.y = dst;
  Q5Rows<false, false>(src, s, nblocks);
}

void DequantQ5_1Avx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s;
  s.y = dst;
  Q5Rows<false, true>(src, s, nblocks);
}

void DequantIQ4_NLAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s;
  s.y = dst;
  IQ4_NLRows(src, s, nblocks);
}

float DotQ5_0Avx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s;
  s.x = x;
  Q5Rows<true, false>(row, s, nblocks);
  return s.Sum();
}

float DotQ5_1Avx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s;
  s.x = x;
  Q5Rows<true, true>(row, s, nblocks);
  return s.Sum();
}

float DotIQ4_NLAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s;
  s.x = x;
  IQ4_NLRows(row, s, nblocks);
  return s.Sum();
}

void DequantIQ4_XSAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s;
  s.y = dst;
  IQ4_XSRows(src, s, nblocks);
}

float DotIQ4_XSAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s;
  s.x = x;
  IQ4_XSRows(row, s, nblocks);
  return s.Sum();
}

void DequantIQ2_XXSAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b)
    DequantIQ2_XXSBlock(src + b * kIQ2_XXSBytes, dst + b * kQKK);
}

void DequantIQ3_XXSAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b)
    DequantIQ3_XXSBlock(src + b * kIQ3_XXSBytes, dst + b * kQKK);
}

namespace {

// sum over one 32-value group of (grid ^ sign) * x, before the group scale; `grid(i)` gives the
// magnitudes of values 8i .. 8i + 7. Two partial sums keep two FMA chains going.
template <typename Grid>
inline __m256 GroupDot(Grid grid, uint32_t aux, const float* x) {
  __m256 s0 = _mm256_mul_ps(_mm256_xor_ps(grid(0), SignMask(aux, 0)), _mm256_loadu_ps(x));
  __m256 s1 = _mm256_mul_ps(_mm256_xor_ps(grid(1), SignMask(aux, 1)), _mm256_loadu_ps(x + 8));
  s0 = _mm256_fmadd_ps(_mm256_xor_ps(grid(2), SignMask(aux, 2)), _mm256_loadu_ps(x + 16), s0);
  s1 = _mm256_fmadd_ps(_mm256_xor_ps(grid(3), SignMask(aux, 3)), _mm256_loadu_ps(x + 24), s1);
  return _mm256_add_ps(s0, s1);
}

// Group g of an IQ2_XXS block at `row`: 4 grid-index bytes, then the sign/scale word.
inline __m256 Iq2GroupDot(const uint8_t* row, int g, const float* x, float d) {
  const uint8_t* grp = row + 2 + 8 * g;
  const uint32_t aux = LoadU32(grp + 4);
  const auto grid = [grp](int i) { return _mm256_load_ps(kIqVec.iq2[grp[i]]); };
  return _mm256_mul_ps(GroupScale(d, aux, 0.25f), GroupDot(grid, aux, x));
}

inline __m256 Iq3GroupDot(const uint8_t* row, int g, const float* x, float d) {
  const uint8_t* qs = row + 2 + 8 * g;
  const uint32_t aux = LoadU32(row + 66 + 4 * g);
  const auto grid = [qs](int i) { return Iq3Vec(qs + 2 * i); };
  return _mm256_mul_ps(GroupScale(d, aux, 0.5f), GroupDot(grid, aux, x));
}

}  // namespace

// Groups alternate between two accumulators, so consecutive groups do not wait on each other.
float DotIQ2_XXSAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kIQ2_XXSBytes) {
    const float d = LoadF16(row);
    for (int g = 0; g < 8; g += 2, x += 64) {
      acc0 = _mm256_add_ps(acc0, Iq2GroupDot(row, g, x, d));
      acc1 = _mm256_add_ps(acc1, Iq2GroupDot(row, g + 1, x + 32, d));
    }
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

float DotIQ3_XXSAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kIQ3_XXSBytes) {
    const float d = LoadF16(row);
    for (int g = 0; g < 8; g += 2, x += 64) {
      acc0 = _mm256_add_ps(acc0, Iq3GroupDot(row, g, x, d));
      acc1 = _mm256_add_ps(acc1, Iq3GroupDot(row, g + 1, x + 32, d));
    }
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

#endif  // DQ_GGML_AVX2

}  // namespace dq::ggml
