// The packed q8 kernels in 256-bit registers (AVX2, and AVX-VNNI where the CPU has it): a group
// of 16 rows as two halves of 8 lanes (bytes 0-31 and 32-63 of each 64-byte vector).
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/q8_packed.h"

#if defined(__AVX2__)

namespace dq::cpu {
namespace {

#define DQ_VNNI __attribute__((target("avxvnni"), always_inline)) inline

inline __m256i Bcast4(const int8_t* q) {
  int v;
  std::memcpy(&v, q, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i Load(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256 HalfToFloat(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// acc = fma(isum, d_w * d_x, acc) [then acc = fma(m_w, s_x, acc)] for 8 lanes: DotQ8Scalar's
// float operations.
inline __m256 Scale(__m256i isum, const uint8_t* d, const uint8_t* m, const Q8Block& x,
                    __m256 acc) {
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                        _mm256_mul_ps(HalfToFloat(d), _mm256_set1_ps(x.d)), acc);
  if (m != nullptr) acc = _mm256_fmadd_ps(HalfToFloat(m), _mm256_set1_ps(x.s), acc);
  return acc;
}

// Q4_1's integer sums of one block, half h. AVX2: each maddubs pair sum is <= 2 * 15 * 127, so
// the 8 of a block add up in int16 (<= 30480) before one widening madd.
inline __m256i IsumQ4_1Avx2(const uint8_t* blk, int h, const Q8Block& x) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256i s16 = _mm256_setzero_si256();
  for (int v = 0; v < 4; ++v) {
    const __m256i w = Load(blk + v * 64 + h * 32);
    s16 =
        _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(w, low), Bcast4(x.q + 4 * v)));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w, 4), low),
                                                     Bcast4(x.q + 16 + 4 * v)));
  }
  return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

DQ_VNNI __m256i IsumQ4_1Vnni(const uint8_t* blk, int h, const Q8Block& x) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  for (int v = 0; v < 4; ++v) {
    const __m256i w = Load(blk + v * 64 + h * 32);
    a = _mm256_dpbusd_avx_epi32(a, _mm256_and_si256(w, low), Bcast4(x.q + 4 * v));
    b = _mm256_dpbusd_avx_epi32(b, _mm256_and_si256(_mm256_srli_epi16(w, 4), low),
                                Bcast4(x.q + 16 + 4 * v));
  }
  return _mm256_add_epi32(a, b);
}

// Q8_0 (stored as w + 128). AVX2: back to signed w, then |w| against x with w's sign.
inline __m256i IsumQ8_0Avx2(const uint8_t* blk, int h, const Q8Block& x) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
  for (int v = 0; v < 8; ++v) {
    const __m256i w = _mm256_xor_si256(Load(blk + v * 64 + h * 32), flip);
    const __m256i p =
        _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(Bcast4(x.q + 4 * v), w));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
  }
  return s;
}

// VNNI: sum((w + 128) x) - 128 sum(x), exactly sum(w x).
DQ_VNNI __m256i IsumQ8_0Vnni(const uint8_t* blk, int h, const Q8Block& x) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  for (int v = 0; v < 8; v += 2) {
    a = _mm256_dpbusd_avx_epi32(a, Load(blk + v * 64 + h * 32), Bcast4(x.q + 4 * v));
    b = _mm256_dpbusd_avx_epi32(b, Load(blk + (v + 1) * 64 + h * 32), Bcast4(x.q + 4 * v + 4));
  }
  return _mm256_sub_epi32(_mm256_add_epi32(a, b), _mm256_set1_epi32(128 * x.sum));
}

}  // namespace

void DotQ8GroupAvx2(const Q8Packed& p, const uint8_t* group, const Q8Block* x, float* out) {
  const int64_t bb = p.block_bytes();
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < p.nblocks; ++b) {
    const uint8_t* blk = group + b * bb;
    if (p.dtype == DType::kQ4_1) {
      acc0 = Scale(IsumQ4_1Avx2(blk, 0, x[b]), blk + 256, blk + 288, x[b], acc0);
      acc1 = Scale(IsumQ4_1Avx2(blk, 1, x[b]), blk + 272, blk + 304, x[b], acc1);
    } else {
      acc0 = Scale(IsumQ8_0Avx2(blk, 0, x[b]), blk + 512, nullptr, x[b], acc0);
      acc1 = Scale(IsumQ8_0Avx2(blk, 1, x[b]), blk + 528, nullptr, x[b], acc1);
    }
  }
  _mm256_storeu_ps(out, acc0);
  _mm256_storeu_ps(out + 8, acc1);
}

__attribute__((target("avxvnni"))) void DotQ8GroupAvxVnni(const Q8Packed& p, const uint8_t* group,
                                                          const Q8Block* x, float* out) {
  const int64_t bb = p.block_bytes();
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  if (p.dtype == DType::kQ4_1) {
    for (int64_t b = 0; b < p.nblocks; ++b) {
      const uint8_t* blk = group + b * bb;
      acc0 = Scale(IsumQ4_1Vnni(blk, 0, x[b]), blk + 256, blk + 288, x[b], acc0);
      acc1 = Scale(IsumQ4_1Vnni(blk, 1, x[b]), blk + 272, blk + 304, x[b], acc1);
    }
  } else {
    for (int64_t b = 0; b < p.nblocks; ++b) {
      const uint8_t* blk = group + b * bb;
      acc0 = Scale(IsumQ8_0Vnni(blk, 0, x[b]), blk + 512, nullptr, x[b], acc0);
      acc1 = Scale(IsumQ8_0Vnni(blk, 1, x[b]), blk + 528, nullptr, x[b], acc1);
    }
  }
  _mm256_storeu_ps(out, acc0);
  _mm256_storeu_ps(out + 8, acc1);
}

}  // namespace dq::cpu

#endif  // __AVX2__
