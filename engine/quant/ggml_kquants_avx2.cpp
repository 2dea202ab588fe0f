// AVX2 kernels for the k-quants (layouts in ggml_kquants.h). The weights go to a Sink that
// either stores them (dequantization, bit-exact with the references) or multiplies them into x
// (fused dot). Q2_K and Q4_K split codes straight from 8-byte loads widened to int32 lanes; the
// others first unpack a super-block into int8 codes with 32-byte operations.
#include "engine/quant/ggml_kquants.h"

#ifdef DQ_GGML_AVX2

namespace dq::ggml {
namespace {

constexpr int kQ2_KBytes = 84;
constexpr int kQ3_KBytes = 110;
constexpr int kQ4_KBytes = 144;
constexpr int kQ5_KBytes = 176;
constexpr int kQ6_KBytes = 210;

inline __m256 Bcast(const float* p) { return _mm256_broadcast_ss(p); }

// out[i] = d * float(b[i]) for the 16 bytes b in `v` (signed or unsigned); the same single
// rounding as the scalar references.
template <bool kSigned>
inline void ScaleBytes16(__m128i v, float d, float* out) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m128i hi = _mm_unpackhi_epi64(v, v);
  const __m256i a = kSigned ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
  const __m256i b = kSigned ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(a), dv));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(b), dv));
}

// The 16 Q3_K scales minus 32 as int8, unpacked four at a time from the 12 bytes (see
// Q3KScale): bytes 0..7 give the low nibbles, byte 8 + s % 4 the top 2 bits.
inline __m128i Q3KScaleBytes(const uint8_t* sc) {
  const uint32_t a = LoadU32(sc), b = LoadU32(sc + 4), c = LoadU32(sc + 8);
  constexpr uint32_t kLow = 0x0f0f0f0f, kTop = 0x03030303;
  const uint32_t s0 = (a & kLow) | (c & kTop) << 4;
  const uint32_t s1 = (b & kLow) | ((c >> 2) & kTop) << 4;
  const uint32_t s2 = ((a >> 4) & kLow) | ((c >> 4) & kTop) << 4;
  const uint32_t s3 = ((b >> 4) & kLow) | ((c >> 6) & kTop) << 4;
  const __m128i v = _mm_setr_epi32(static_cast<int>(s0), static_cast<int>(s1), static_cast<int>(s2),
                                   static_cast<int>(s3));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// The 8 scales (times d) and 8 mins (times dmin) of a Q4_K / Q5_K block (see KScaleMin).
inline void Q45KScales(const uint8_t* s, float d, float dmin, float* dsc, float* dmn) {
  const uint32_t a = LoadU32(s), b = LoadU32(s + 4), c = LoadU32(s + 8);
  const uint32_t sc_lo = a & 0x3f3f3f3f, mn_lo = b & 0x3f3f3f3f;
  const uint32_t sc_hi = (c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030);
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0f) | ((b >> 2) & 0x30303030);
  const __m128i sc = _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi),
                                    static_cast<int>(mn_lo), static_cast<int>(mn_hi));
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc));
  const __m256 mnf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(sc, sc)));
  _mm256_storeu_ps(dsc, _mm256_mul_ps(scf, _mm256_set1_ps(d)));
  _mm256_storeu_ps(dmn, _mm256_mul_ps(mnf, _mm256_set1_ps(dmin)));
}

// Q2_K: element e = 128h + 32j + 8k + i (i < 8) is bits 2j of qs[32h + 8k + i]; scales[s]
// holds the scale of sub-block s in its low nibble and the min in its high nibble. Splitting
// the codes straight from 8-byte loads beats a code buffer here: one widening serves 32 weights.
template <bool kDot>
void Q2KRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  const __m256i three = _mm256_set1_epi32(3);
  const __m128i low4 = _mm_set1_epi8(15);
  for (int64_t b = 0; b < nblocks; ++b, src += kQ2_KBytes, s.Advance(kQKK)) {
    float dl[16], ml[16];
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    ScaleBytes16<false>(_mm_and_si128(sm, low4), LoadF16(src + 80), dl);
    ScaleBytes16<false>(_mm_and_si128(_mm_srli_epi16(sm, 4), low4), LoadF16(src + 82), ml);
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        const __m256i v = Widen8(src + 16 + 32 * h + 8 * k);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 2 * j), three));
          const int sub = 8 * h + 2 * j + k / 2;
          s.Put(j, 128 * h + 32 * j + 8 * k,
                Sink<kDot>::MulSub(q, Bcast(dl + sub), Bcast(ml + sub)));
        }
      }
    }
  }
}

// Q4_K: byte 32c + 8k + i of qs holds elements 64c + 8k + i (low nibble) and
// 64c + 32 + 8k + i (high nibble), in sub-blocks 2c and 2c + 1.
template <bool kDot>
void Q4KRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  const __m256i mask = _mm256_set1_epi32(15);
  for (int64_t b = 0; b < nblocks; ++b, src += kQ4_KBytes, s.Advance(kQKK)) {
    float dsc[8], dmn[8];
    Q45KScales(src + 4, LoadF16(src), LoadF16(src + 2), dsc, dmn);
    const uint8_t* qs = src + 16;
    for (int c = 0; c < 4; ++c) {
      const __m256 d0 = Bcast(dsc + 2 * c), m0 = Bcast(dmn + 2 * c);
      const __m256 d1 = Bcast(dsc + 2 * c + 1), m1 = Bcast(dmn + 2 * c + 1);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i v = Widen8(qs + 32 * c + 8 * k);
        const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));
        const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        s.Put(k, 64 * c + 8 * k, Sink<kDot>::MulSub(lo, d0, m0));
        s.Put(k, 64 * c + 32 + 8 * k, Sink<kDot>::MulSub(hi, d1, m1));
      }
    }
  }
}

// ---- Q3_K, Q5_K, Q6_K: codes first, then scales ----
// These unpack a whole super-block into 256 int8 codes with 32-byte operations (32 codes per
// instruction instead of 8 in int32 lanes: these formats spend several bit operations per code),
// then run one simple loop that widens 8 codes at a time from the buffer and scales them.

using Bytes = __m256i;
inline Bytes Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void Store32(int8_t* p, Bytes v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
inline Bytes Splat(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
// Per byte: (v >> n) & mask (the 16-bit shift leaks bits across bytes; the mask drops them).
inline Bytes ShrMask(Bytes v, int n, int mask) {
  return _mm256_and_si256(_mm256_srli_epi16(v, n), Splat(mask));
}
// Per byte: `val` where bit `bit` of v is set, else 0.
inline Bytes IfBit(Bytes v, int bit, int val) {
  const Bytes b = Splat(1 << bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, b), b), Splat(val));
}
inline __m256 WidenCodes(const int8_t* q) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

// w[e] = scale[e / 16] * q[e] (Q3_K, Q6_K: one rounding, as ggml). The dot sums q * x over each
// 16-value sub-block first and scales the sum, one multiply per 16 weights instead of 16.
template <bool kDot>
void ScaledCodes16(const int8_t* q, const float* scale, Sink<kDot>& s) {
  for (int base = 0; base < 16; base += 4) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const int sub = base + i;
      const __m256 q0 = WidenCodes(q + 16 * sub), q1 = WidenCodes(q + 16 * sub + 8);
      if constexpr (kDot) {
        const __m256 t = _mm256_fmadd_ps(q1, _mm256_loadu_ps(s.x + 16 * sub + 8),
                                         _mm256_mul_ps(q0, _mm256_loadu_ps(s.x + 16 * sub)));
        s.acc[i] = _mm256_fmadd_ps(Bcast(scale + sub), t, s.acc[i]);
      } else {
        s.Put(i, 16 * sub, _mm256_mul_ps(q0, Bcast(scale + sub)));
        s.Put(i, 16 * sub + 8, _mm256_mul_ps(q1, Bcast(scale + sub)));
      }
    }
  }
}

// Q3_K: codes[128h + 32j + l] = ((qs[32h + l] >> 2j) & 3) - (hmask bit 4h + j of byte l ? 0 : 4).
template <bool kDot>
void Q3KRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  alignas(32) int8_t codes[kQKK];
  for (int64_t b = 0; b < nblocks; ++b, src += kQ3_KBytes, s.Advance(kQKK)) {
    const Bytes hm = Load32(src);
    for (int h = 0; h < 2; ++h) {
      const Bytes qs = Load32(src + 32 + 32 * h);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const Bytes minus4 = _mm256_sub_epi8(IfBit(hm, 4 * h + j, 4), Splat(4));
        Store32(codes + 128 * h + 32 * j, _mm256_add_epi8(ShrMask(qs, 2 * j, 3), minus4));
      }
    }
    float dl[16];
    ScaleBytes16<true>(Q3KScaleBytes(src + 96), LoadF16(src + 108), dl);
    ScaledCodes16(codes, dl, s);
  }
}

// Q6_K: codes[128h + 32j + l] = (nibble j / 2 of ql[64h + 32(j % 2) + l]
//                                | ((qh[32h + l] >> 2j) & 3) << 4) - 32.
template <bool kDot>
void Q6KRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  alignas(32) int8_t codes[kQKK];
  const Bytes low4 = Splat(15), top2 = Splat(0x30), bias = Splat(32);
  for (int64_t b = 0; b < nblocks; ++b, src += kQ6_KBytes, s.Advance(kQKK)) {
    for (int h = 0; h < 2; ++h) {
      const Bytes a = Load32(src + 64 * h), c = Load32(src + 64 * h + 32);
      const Bytes hb = Load32(src + 128 + 32 * h);
      const Bytes q[4] = {_mm256_or_si256(_mm256_and_si256(a, low4),
                                          _mm256_and_si256(_mm256_slli_epi16(hb, 4), top2)),
                          _mm256_or_si256(_mm256_and_si256(c, low4),
                                          _mm256_and_si256(_mm256_slli_epi16(hb, 2), top2)),
                          _mm256_or_si256(ShrMask(a, 4, 15), _mm256_and_si256(hb, top2)),
                          _mm256_or_si256(ShrMask(c, 4, 15), ShrMask(hb, 2, 0x30))};
      for (int j = 0; j < 4; ++j) Store32(codes + 128 * h + 32 * j, _mm256_sub_epi8(q[j], bias));
    }
    float dl[16];
    ScaleBytes16<true>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 192)),
                       LoadF16(src + 208), dl);
    ScaledCodes16(codes, dl, s);
  }
}

// w[e] = dsc[e / 32] * q[e] - dmn[e / 32] (Q5_K), rounded as ggml.
template <bool kDot>
void MinCodes(const int8_t* q, const float* dsc, const float* dmn, Sink<kDot>& s) {
  for (int c = 0; c < kQKK; c += 32) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int off = c + 8 * k, sub = c / 32;
      s.Put(k, off, Sink<kDot>::MulSub(WidenCodes(q + off), Bcast(dsc + sub), Bcast(dmn + sub)));
    }
  }
}

// Q5_K: codes[64c + 32k + l] = nibble k of qs[32c + l] | bit 2c + k of qh[l] << 4, in
// sub-block 2c + k.
template <bool kDot>
void Q5KRows(const uint8_t* src, Sink<kDot>& s, int64_t nblocks) {
  alignas(32) int8_t codes[kQKK];
  for (int64_t b = 0; b < nblocks; ++b, src += kQ5_KBytes, s.Advance(kQKK)) {
    const Bytes qh = Load32(src + 16);
    for (int c = 0; c < 4; ++c) {
      const Bytes qs = Load32(src + 48 + 32 * c);
      Store32(codes + 64 * c,
              _mm256_or_si256(_mm256_and_si256(qs, Splat(15)), IfBit(qh, 2 * c, 16)));
      Store32(codes + 64 * c + 32, _mm256_or_si256(ShrMask(qs, 4, 15), IfBit(qh, 2 * c + 1, 16)));
    }
    float dsc[8], dmn[8];
    Q45KScales(src + 4, LoadF16(src), LoadF16(src + 2), dsc, dmn);
    MinCodes(codes, dsc, dmn, s);
  }
}

template <bool kDot>
Sink<kDot> MakeSink(const float* x, float* y) {
  Sink<kDot> s;
  s.x = x;
  s.y = y;
  return s;
}

}  // namespace

void DequantQ2_KAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s = MakeSink<false>(nullptr, dst);
  Q2KRows(src, s, nblocks);
}
void DequantQ3_KAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s = MakeSink<false>(nullptr, dst);
  Q3KRows(src, s, nblocks);
}
void DequantQ4_KAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s = MakeSink<false>(nullptr, dst);
  Q4KRows(src, s, nblocks);
}
void DequantQ5_KAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s = MakeSink<false>(nullptr, dst);
  Q5KRows(src, s, nblocks);
}
void DequantQ6_KAvx2(const uint8_t* src, float* dst, int64_t nblocks) {
  Sink<false> s = MakeSink<false>(nullptr, dst);
  Q6KRows(src, s, nblocks);
}

float DotQ2_KAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s = MakeSink<true>(x, nullptr);
  Q2KRows(row, s, nblocks);
  return s.Sum();
}
float DotQ3_KAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s = MakeSink<true>(x, nullptr);
  Q3KRows(row, s, nblocks);
  return s.Sum();
}
float DotQ4_KAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s = MakeSink<true>(x, nullptr);
  Q4KRows(row, s, nblocks);
  return s.Sum();
}
float DotQ5_KAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s = MakeSink<true>(x, nullptr);
  Q5KRows(row, s, nblocks);
  return s.Sum();
}
float DotQ6_KAvx2(const uint8_t* row, const float* x, int64_t nblocks) {
  Sink<true> s = MakeSink<true>(x, nullptr);
  Q6KRows(row, s, nblocks);
  return s.Sum();
}

}  // namespace dq::ggml

#endif  // DQ_GGML_AVX2
