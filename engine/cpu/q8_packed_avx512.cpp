// The packed q8 kernels in 512-bit registers (AVX-512 VNNI): one 16-row group per register.
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/q8_packed.h"

#if defined(__AVX2__)

namespace dq::cpu {
namespace {

#define DQ_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline
#define DQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

DQ_AVX512_INLINE __m512i Bcast4(const int8_t* q) {
  int v;
  std::memcpy(&v, q, 4);
  return _mm512_set1_epi32(v);
}

DQ_AVX512_INLINE __m512i Load(const uint8_t* p) { return _mm512_loadu_si512(p); }

DQ_AVX512_INLINE __m512 HalfToFloat(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

DQ_AVX512_INLINE __m512 Scale(__m512i isum, const uint8_t* d, const Q8Block& x, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                         _mm512_mul_ps(HalfToFloat(d), _mm512_set1_ps(x.d)), acc);
}

DQ_AVX512_INLINE __m512i IsumQ4_1(const uint8_t* blk, const Q8Block& x) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
  for (int v = 0; v < 4; ++v) {
    const __m512i w = Load(blk + v * 64);
    a = _mm512_dpbusd_epi32(a, _mm512_and_si512(w, low), Bcast4(x.q + 4 * v));
    b = _mm512_dpbusd_epi32(b, _mm512_and_si512(_mm512_srli_epi16(w, 4), low),
                            Bcast4(x.q + 16 + 4 * v));
  }
  return _mm512_add_epi32(a, b);
}

DQ_AVX512_INLINE __m512i IsumQ8_0(const uint8_t* blk, const Q8Block& x) {
  __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
  for (int v = 0; v < 8; v += 2) {
    a = _mm512_dpbusd_epi32(a, Load(blk + v * 64), Bcast4(x.q + 4 * v));
    b = _mm512_dpbusd_epi32(b, Load(blk + (v + 1) * 64), Bcast4(x.q + 4 * v + 4));
  }
  return _mm512_sub_epi32(_mm512_add_epi32(a, b), _mm512_set1_epi32(128 * x.sum));
}

}  // namespace

DQ_AVX512 void DotQ8GroupAvx512(const Q8Packed& p, const uint8_t* group, const Q8Block* x,
                                float* out) {
  const int64_t bb = p.block_bytes();
  __m512 acc = _mm512_setzero_ps();
  if (p.dtype == DType::kQ4_1) {
    for (int64_t b = 0; b < p.nblocks; ++b) {
      const uint8_t* blk = group + b * bb;
      acc = Scale(IsumQ4_1(blk, x[b]), blk + 256, x[b], acc);
      acc = _mm512_fmadd_ps(HalfToFloat(blk + 288), _mm512_set1_ps(x[b].s), acc);
    }
  } else {
    for (int64_t b = 0; b < p.nblocks; ++b) {
      const uint8_t* blk = group + b * bb;
      acc = Scale(IsumQ8_0(blk, x[b]), blk + 512, x[b], acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

}  // namespace dq::cpu

#endif  // __AVX2__
