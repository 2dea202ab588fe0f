#include "engine/cpu/q8_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/quant/ggml_simd.h"

namespace dq::cpu {
namespace {

constexpr int64_t kQ4_1Bytes = 20;  // f16 d, f16 m, 16 bytes of nibbles (j, j + 16)
constexpr int64_t kQ8_0Bytes = 34;  // f16 d, 32 int8

#if defined(__AVX2__)
// sum over 32 lanes of u8 a * s8 b, as 8 int32 partial sums.
__m256i DotU8S8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// The block's f16 d and m converted together (F16C), as the fp32 kernels do.
__m128 HalfPair(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
}

// One Q4_1 block of one row against x's block: DotQ4_1Avx2's loop body, shared by the multi-row
// kernel so that each row's result is the same bits either way.
inline void Q4_1Block(const uint8_t* row, const Q8Block& x, __m256i q8, __m256& acc, __m128& mins) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 4));
  const __m256i q4 =
      _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), _mm_and_si128(bytes, low));
  // (d_w * d_x, m_w * s_x) in one product.
  const __m128 scales = _mm_mul_ps(
      HalfPair(row), _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&x.d))));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DotU8S8(q4, q8)), _mm256_broadcastss_ps(scales), acc);
  mins = _mm_add_ss(mins, _mm_movehdup_ps(scales));
}

float DotQ4_1Avx2(const uint8_t* row, const Q8Block* x, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  __m128 mins = _mm_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kQ4_1Bytes) {
    Q4_1Block(row, x[b], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q)), acc, mins);
  }
  return ggml::HorizontalSum(acc) + _mm_cvtss_f32(mins);
}

// The same four rows with AVX-VNNI: one vpdpbusd instead of maddubs + madd per block (the same
// integer sums, so the same bits as the AVX2 kernels).
__attribute__((target("avx2,fma,f16c,avxvnni"))) void DotQ4_1Rows4Vnni(
    const uint8_t* row, int64_t row_bytes, const Q8Block* x, int64_t nblocks, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m128 mins[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  const __m128i low = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m128 xds = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&x[b].d)));
    for (int r = 0; r < 4; ++r) {
      const uint8_t* blk = row + r * row_bytes + b * kQ4_1Bytes;
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
      const __m256i q4 =
          _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), _mm_and_si128(bytes, low));
      const __m128 scales = _mm_mul_ps(HalfPair(blk), xds);
      const __m256i sum = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q4, q8);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_broadcastss_ps(scales), acc[r]);
      mins[r] = _mm_add_ss(mins[r], _mm_movehdup_ps(scales));
    }
  }
  for (int r = 0; r < 4; ++r) out[r] = ggml::HorizontalSum(acc[r]) + _mm_cvtss_f32(mins[r]);
}

// Four rows (row_bytes apart) against one x: each x block is loaded once for all four.
void DotQ4_1Rows4Avx2(const uint8_t* row, int64_t row_bytes, const Q8Block* x, int64_t nblocks,
                      float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m128 mins[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    for (int r = 0; r < 4; ++r) {
      Q4_1Block(row + r * row_bytes + b * kQ4_1Bytes, x[b], q8, acc[r], mins[r]);
    }
  }
  for (int r = 0; r < 4; ++r) out[r] = ggml::HorizontalSum(acc[r]) + _mm_cvtss_f32(mins[r]);
}

// One Q8_0 block of one row: its signed weights' |w| as the unsigned operand and x's sign moved
// onto it. Shared by the single- and multi-row kernels (the same bits either way).
inline void Q8_0Block(const uint8_t* row, const Q8Block& x, __m256i q8, __m256& acc) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2));
  const __m256 sum = _mm256_cvtepi32_ps(DotU8S8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(q8, w)));
  const float d = ggml::LoadF16(row);
  acc = _mm256_fmadd_ps(sum, _mm256_set1_ps(d * x.d), acc);
}

float DotQ8_0Avx2(const uint8_t* row, const Q8Block* x, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kQ8_0Bytes) {
    Q8_0Block(row, x[b], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q)), acc);
  }
  return ggml::HorizontalSum(acc);
}

void DotQ8_0Rows4Avx2(const uint8_t* row, int64_t row_bytes, const Q8Block* x, int64_t nblocks,
                      float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t b = 0; b < nblocks; ++b) {
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    for (int r = 0; r < 4; ++r) Q8_0Block(row + r * row_bytes + b * kQ8_0Bytes, x[b], q8, acc[r]);
  }
  for (int r = 0; r < 4; ++r) out[r] = ggml::HorizontalSum(acc[r]);
}
#endif

}  // namespace

bool CpuHasAvxVnni() {
#if defined(__AVX2__)
  static const bool has = __builtin_cpu_supports("avxvnni");  // fixed for the process
  return has;
#else
  return false;
#endif
}

bool HasQ8Dot(DType t) { return t == DType::kQ4_1 || t == DType::kQ8_0; }

void QuantizeQ8(const float* x, int64_t n, Q8Block* out) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    Q8Block& o = out[b];
    o.d = amax / 127.0f;
    const float inv = o.d > 0.0f ? 1.0f / o.d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      o.q[i] = static_cast<int8_t>(std::lround(x[i] * inv));
      sum += o.q[i];
    }
    o.s = o.d * static_cast<float>(sum);
  }
}

float DotQ8Scalar(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks) {
  float total = 0.0f;
  for (int64_t b = 0; b < nblocks; ++b) {
    int sum = 0;
    if (t == DType::kQ4_1) {
      const uint8_t* qs = row + b * kQ4_1Bytes + 4;
      for (int j = 0; j < 16; ++j) sum += (qs[j] & 15) * x[b].q[j] + (qs[j] >> 4) * x[b].q[j + 16];
      const uint8_t* blk = row + b * kQ4_1Bytes;
      total +=
          ggml::LoadF16(blk) * x[b].d * static_cast<float>(sum) + ggml::LoadF16(blk + 2) * x[b].s;
    } else {
      const uint8_t* blk = row + b * kQ8_0Bytes;
      const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
      for (int j = 0; j < 32; ++j) sum += qs[j] * x[b].q[j];
      total += ggml::LoadF16(blk) * x[b].d * static_cast<float>(sum);
    }
  }
  return total;
}

void DotQ8Rows(DType t, const uint8_t* rows, int64_t row_bytes, int nrows, const Q8Block* x,
               int64_t nblocks, float* out, Q8Isa isa) {
  int r = 0;
#if defined(__AVX2__)
  if (t == DType::kQ4_1) {
    const bool vnni = isa != Q8Isa::kAvx2 && CpuHasAvxVnni();
    const auto rows4 = vnni ? DotQ4_1Rows4Vnni : DotQ4_1Rows4Avx2;
    for (; r + 4 <= nrows; r += 4) rows4(rows + r * row_bytes, row_bytes, x, nblocks, out + r);
  } else if (t == DType::kQ8_0) {
    for (; r + 4 <= nrows; r += 4) {
      DotQ8_0Rows4Avx2(rows + r * row_bytes, row_bytes, x, nblocks, out + r);
    }
  }
#endif
  for (; r < nrows; ++r) out[r] = DotQ8(t, rows + r * row_bytes, x, nblocks);
}

float DotQ8(DType t, const uint8_t* row, const Q8Block* x, int64_t nblocks) {
#if defined(__AVX2__)
  return t == DType::kQ4_1 ? DotQ4_1Avx2(row, x, nblocks) : DotQ8_0Avx2(row, x, nblocks);
#else
  return DotQ8Scalar(t, row, x, nblocks);
#endif
}

}  // namespace dq::cpu
