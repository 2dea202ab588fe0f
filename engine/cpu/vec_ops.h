// Small vector primitives for the CPU kernels (AVX2 + FMA when built for x86-64-v3).
#pragma once

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace dq::cpu {

// One accumulator per lane, stepping 8 at a time: the same summation order as Dot4x3, so a
// matmul result does not depend on which kernel (or batch size) produced it.
inline float DotF32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  sum = _mm_cvtss_f32(s);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out[i * out_stride + j] = dot(w + i * n, x + j * n) for 4 weight rows i and 3 activation
// rows j. Register-blocked so each loaded vector feeds several FMAs (the prefill GEMM kernel);
// the summation order per output is the same as DotF32's single-accumulator lanes.
inline void Dot4x3(const float* w, const float* x, int64_t n, float* out, int64_t out_stride) {
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[4][3];
  for (auto& r : acc)
    for (auto& a : r) a = _mm256_setzero_ps();
  for (; k + 8 <= n; k += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + k), x1 = _mm256_loadu_ps(x + n + k),
                 x2 = _mm256_loadu_ps(x + 2 * n + k);
    for (int i = 0; i < 4; ++i) {
      const __m256 wi = _mm256_loadu_ps(w + i * n + k);
      acc[i][0] = _mm256_fmadd_ps(wi, x0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(wi, x1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(wi, x2, acc[i][2]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[i][j]), _mm256_extractf128_ps(acc[i][j], 1));
      s = _mm_hadd_ps(s, s);
      s = _mm_hadd_ps(s, s);
      out[j * out_stride + i] = _mm_cvtss_f32(s);
    }
  }
#else
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) out[j * out_stride + i] = 0.0f;
#endif
  for (; k < n; ++k) {
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) out[j * out_stride + i] += w[i * n + k] * x[j * n + k];
  }
}

// y += a * x
inline void Axpy(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace dq::cpu
