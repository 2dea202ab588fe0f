// Small helpers shared by the ggml block kernels (engine/quant/ggml_*.cpp); internal.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/dtype.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define DQ_GGML_AVX2 1
#endif

namespace dq::ggml {

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Hides `v` from the optimizer so a following `v + m` is not contracted into an FMA: ggml and
// gguf-py round q * d to fp32 before adding m, and we must match them bit for bit.
inline float Opaque(float v) {
#if defined(__GNUC__) && defined(__x86_64__)
  asm("" : "+x"(v));
  return v;
#else
  volatile float t = v;
  return t;
#endif
}

// The fp16 at `p` as fp32 (exact). F16C does it in one instruction; the portable F16ToF32 is an
// out-of-line call that would also force the vector kernels to spill their accumulators.
inline float LoadF16(const uint8_t* p) {
#ifdef DQ_GGML_AVX2
  return _cvtsh_ss(LoadU16(p));
#else
  return F16ToF32(LoadU16(p));
#endif
}

#ifdef DQ_GGML_AVX2

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Broadcasts the fp16 at `p`. Loads 4 bytes (a plain vector load, no insert shuffle); only the
// first 2 are used, so a caller must know 2 more bytes follow the scale.
inline __m256 BroadcastF16(const uint8_t* p) {
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(LoadU32(p)))));
}

// Bytes p[0..7], zero-extended to 8 int32 lanes.
inline __m256i Widen8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Where a block kernel sends each vector of 8 weights: either stored (dequantization) or
// multiplied into 4 independent accumulators against x (fused dot). `kDot` also tells the
// kernels whether they must round like ggml (dequantization) or may use FMAs (dot).
template <bool kDot>
struct Sink {
  const float* x = nullptr;
  float* y = nullptr;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};

  // Weights for elements off .. off + 7 of the current block; `slot` picks the accumulator.
  inline void Put(int slot, int off, __m256 w) {
    if constexpr (kDot) {
      acc[slot & 3] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + off), acc[slot & 3]);
    } else {
      _mm256_storeu_ps(y + off, w);
    }
  }
  inline void Advance(int n) {
    if constexpr (kDot) {
      x += n;
    } else {
      y += n;
    }
  }
  float Sum() const {
    return HorizontalSum(
        _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  }

  // q * d - m. Dequantization rounds the product first, as ggml and gguf-py do; the asm keeps
  // the compiler from fusing it. The dot product takes the one-rounding FMA.
  static inline __m256 MulSub(__m256 q, __m256 d, __m256 m) {
    if constexpr (kDot) {
      return _mm256_fmsub_ps(q, d, m);
    } else {
      __m256 p = _mm256_mul_ps(q, d);
      asm("" : "+x"(p));
      return _mm256_sub_ps(p, m);
    }
  }
  // (q - bias) * s for int32 codes q, with bias_s = bias * s (exact: bias is a power of 2).
  // Dequantization subtracts in int32 and multiplies, as ggml does, so even the sign of a zero
  // matches; the dot product uses one FMA, q * s - bias_s, which rounds the same exact value.
  static inline __m256 Biased(__m256i q, __m256i bias, __m256 s, __m256 bias_s) {
    if constexpr (kDot) {
      return _mm256_fmsub_ps(_mm256_cvtepi32_ps(q), s, bias_s);
    } else {
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, bias)), s);
    }
  }
  // q * d + m, rounded like MulSub.
  static inline __m256 MulAdd(__m256 q, __m256 d, __m256 m) {
    if constexpr (kDot) {
      return _mm256_fmadd_ps(q, d, m);
    } else {
      __m256 p = _mm256_mul_ps(q, d);
      asm("" : "+x"(p));
      return _mm256_add_ps(p, m);
    }
  }
};

#endif  // DQ_GGML_AVX2

}  // namespace dq::ggml
