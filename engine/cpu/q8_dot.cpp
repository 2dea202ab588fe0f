#include "engine/cpu/q8_dot.h"

#include <algorithm>
#include <cmath>

#include "engine/quant/ggml_simd.h"

namespace dq::cpu {
namespace {

constexpr int64_t kQ4_1Bytes = 20;  // f16 d, f16 m, 16 bytes of nibbles (j, j + 16)
constexpr int64_t kQ8_0Bytes = 34;  // f16 d, 32 int8

// d, 1 / d (0 for an all-zero block) from the block's amax, as both versions compute them.
inline float InverseStep(float amax, float* d) {
  *d = amax / 127.0f;
  return *d > 0.0f ? 1.0f / *d : 0.0f;
}

#if defined(__AVX2__)
void QuantizeBlockAvx2(const float* x, Q8Block& o) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4], amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const __m256 inv = _mm256_set1_ps(InverseStep(_mm_cvtss_f32(m), &o.d));
  __m256i q[4];  // cvtps rounds to nearest even (the default MXCSR mode), as nearbyint does
  for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
  __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  o.sum = _mm_cvtsi128_si32(s);
  o.s = o.d * static_cast<float>(o.sum);
  // int32 -> int8 in order: packs interleave 128-bit lanes, the permute puts them back.
  const __m256i w16 = _mm256_packs_epi32(q[0], q[1]), w16b = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, w16b),
                                                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q), b8);
}
#endif

}  // namespace

bool HasQ8Dot(DType t) { return t == DType::kQ4_1 || t == DType::kQ8_0; }

void QuantizeQ8Scalar(const float* x, int64_t n, Q8Block* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    Q8Block& o = out[b];
    const float inv = InverseStep(amax, &o.d);
    o.sum = 0;
    for (int i = 0; i < 32; ++i) {
      o.q[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
      o.sum += o.q[i];
    }
    o.s = o.d * static_cast<float>(o.sum);
  }
}

void QuantizeQ8(const float* x, int64_t n, Q8Block* out) {
#if defined(__AVX2__)
  for (int64_t b = 0; b < n / 32; ++b) QuantizeBlockAvx2(x + 32 * b, out[b]);
#else
  QuantizeQ8Scalar(x, n, out);
#endif
}

float DotQ8Scalar(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nblocks; ++b) {
    int sum = 0;
    if (t == DType::kQ4_1) {
      const uint8_t* blk = row + b * kQ4_1Bytes;
      const uint8_t* qs = blk + 4;
      for (int j = 0; j < 16; ++j) sum += (qs[j] & 15) * x[b].q[j] + (qs[j] >> 4) * x[b].q[j + 16];
      acc = std::fma(static_cast<float>(sum), ggml::LoadF16(blk) * x[b].d, acc);
      acc = std::fma(ggml::LoadF16(blk + 2), x[b].s, acc);
    } else {
      const uint8_t* blk = row + b * kQ8_0Bytes;
      const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
      for (int j = 0; j < 32; ++j) sum += qs[j] * x[b].q[j];
      acc = std::fma(static_cast<float>(sum), ggml::LoadF16(blk) * x[b].d, acc);
    }
  }
  return acc;
}

}  // namespace dq::cpu
