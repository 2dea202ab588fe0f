#include "engine/quant/ggml_blocks.h"

#include <cstring>

#include "engine/quant/ggml_kquants.h"
#include "engine/quant/ggml_simd.h"

namespace dq {
namespace {

using ggml::kQK;
using ggml::LoadU16;
using ggml::Opaque;
constexpr int64_t kQ4_0Bytes = 18;
constexpr int64_t kQ4_1Bytes = 20;
constexpr int64_t kQ8_0Bytes = 34;

// ---- Scalar reference paths (also the tail/fallback of the vector code) ----

void DequantQ4_0Scalar(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ4_0Bytes, dst += kQK) {
    const float d = F16ToF32(LoadU16(src));
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantQ4_1Scalar(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ4_1Bytes, dst += kQK) {
    const float d = F16ToF32(LoadU16(src));
    const float m = F16ToF32(LoadU16(src + 2));
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = Opaque(static_cast<float>(qs[j] & 0x0F) * d) + m;
      dst[j + 16] = Opaque(static_cast<float>(qs[j] >> 4) * d) + m;
    }
  }
}

void DequantQ8_0Scalar(const uint8_t* src, float* dst, int64_t nblocks) {
  for (int64_t b = 0; b < nblocks; ++b, src += kQ8_0Bytes, dst += kQK) {
    const float d = F16ToF32(LoadU16(src));
    for (int j = 0; j < kQK; ++j) {
      dst[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
    }
  }
}

void DequantScalar(DType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(src + 2 * i));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(LoadU16(src + 2 * i));
      return;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, src + 4 * i, sizeof v);
        dst[i] = static_cast<float>(v);
      }
      return;
    case DType::kQ4_0:
      return DequantQ4_0Scalar(src, dst, n / kQK);
    case DType::kQ4_1:
      return DequantQ4_1Scalar(src, dst, n / kQK);
    case DType::kQ8_0:
      return DequantQ8_0Scalar(src, dst, n / kQK);
    default:
      ggml::DequantizeBlocksRef(t, src, dst, n / DTypeBlockElems(t));
      return;
  }
}

// Dot product by dequantizing one block (or a chunk of a scalar type) at a time.
float DotScalar(DType t, const uint8_t* row, const float* x, int64_t n) {
  const int64_t chunk = DTypeBlockElems(t) == 1 ? 64 : DTypeBlockElems(t);
  const int64_t chunk_bytes = DTypeRowBytes(t, chunk);
  float buf[ggml::kQKK];
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i += chunk, row += chunk_bytes) {
    const int64_t len = n - i < chunk ? n - i : chunk;
    DequantScalar(t, row, buf, len);
    for (int64_t j = 0; j < len; ++j) sum += buf[j] * x[i + j];
  }
  return sum;
}

#ifdef DQ_GGML_AVX2

using ggml::BroadcastF16;
using ggml::HorizontalSum;

// The 32 nibbles of a Q4 block as fp32 in element order, minus `bias` (8 for Q4_0, 0 for Q4_1).
// Widening bytes 0..7 and 8..15 straight from memory to 32-bit lanes and splitting the nibbles
// there needs 2 shuffles per block instead of 6, which is what limits this loop.
inline void UnpackNibbles(const uint8_t* qs, int bias, __m256 q[4]) {
  const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i mask = _mm256_set1_epi32(0x0F);
  const __m256i bv = _mm256_set1_epi32(bias);
  q[0] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(a, mask), bv));
  q[1] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(b, mask), bv));
  q[2] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(a, 4), bv));
  q[3] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(b, 4), bv));
}

inline void UnpackQ8(const uint8_t* qs, __m256 q[4]) {
  for (int k = 0; k < 4; ++k) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * k));
    q[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
}

// sum_k q[k] * x[8k .. 8k+7], as a vector; two chains keep the FMA latency off the critical path.
inline __m256 BlockDot(const __m256 q[4], const float* x) {
  __m256 p0 = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
  __m256 p1 = _mm256_mul_ps(q[1], _mm256_loadu_ps(x + 8));
  p0 = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), p0);
  p1 = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), p1);
  return _mm256_add_ps(p0, p1);
}

void DequantQuantAvx2(DType t, const uint8_t* src, float* dst, int64_t nblocks) {
  __m256 q[4];
  for (int64_t b = 0; b < nblocks; ++b, dst += kQK) {
    if (t == DType::kQ8_0) {
      const __m256 d = BroadcastF16(src);
      UnpackQ8(src + 2, q);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(q[k], d));
      src += kQ8_0Bytes;
    } else if (t == DType::kQ4_0) {
      const __m256 d = BroadcastF16(src);
      UnpackNibbles(src + 2, 8, q);
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(q[k], d));
      src += kQ4_0Bytes;
    } else {  // kQ4_1
      const __m256 d = BroadcastF16(src);
      const __m256 m = BroadcastF16(src + 2);
      UnpackNibbles(src + 4, 0, q);
      for (int k = 0; k < 4; ++k) {
        __m256 prod = _mm256_mul_ps(q[k], d);
        asm("" : "+x"(prod));  // Round the product before adding m (see Opaque()).
        _mm256_storeu_ps(dst + 8 * k, _mm256_add_ps(prod, m));
      }
      src += kQ4_1Bytes;
    }
  }
}

float DotQ4_0Avx2(const uint8_t* row, const float* x, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  __m256 q[4];
  for (int64_t b = 0; b < nblocks; ++b, row += kQ4_0Bytes, x += kQK) {
    UnpackNibbles(row + 2, 8, q);
    acc = _mm256_fmadd_ps(BroadcastF16(row), BlockDot(q, x), acc);
  }
  return HorizontalSum(acc);
}

// Rebuilds each weight as q * d + m (one FMA) and accumulates w * x in four independent chains.
float DotQ4_1Avx2(const uint8_t* row, const float* x, int64_t nblocks) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  __m256 q[4];
  for (int64_t b = 0; b < nblocks; ++b, row += kQ4_1Bytes, x += kQK) {
    UnpackNibbles(row + 4, 0, q);
    // d and m are adjacent halves: one 32-bit load and one conversion serve both.
    uint32_t dm_bits;
    std::memcpy(&dm_bits, row, sizeof dm_bits);
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm_bits)));
    const __m256 d = _mm256_broadcastss_ps(dm);
    const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(_mm256_fmadd_ps(q[k], d, m), _mm256_loadu_ps(x + 8 * k), acc[k]);
    }
  }
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

float DotQ8_0Avx2(const uint8_t* row, const float* x, int64_t nblocks) {
  __m256 acc = _mm256_setzero_ps();
  __m256 q[4];
  for (int64_t b = 0; b < nblocks; ++b, row += kQ8_0Bytes, x += kQK) {
    UnpackQ8(row + 2, q);
    acc = _mm256_fmadd_ps(BroadcastF16(row), BlockDot(q, x), acc);
  }
  return HorizontalSum(acc);
}

// Multi-row variants: NR rows (row_bytes apart) against one x, each row's arithmetic being
// exactly the op sequence of the single-row kernel above (so results are bit-identical to
// DotRow); only the x loads, the loop overhead and the call are shared between rows.
template <int NR>
void DotRowsQ4_0Avx2(const uint8_t* row, int64_t row_bytes, const float* x, int64_t nblocks,
                     float* out) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kQ4_0Bytes, x += kQK) {
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = row + r * row_bytes;
      __m256 q[4];
      UnpackNibbles(p + 2, 8, q);
      __m256 p0 = _mm256_mul_ps(q[0], x0);
      __m256 p1 = _mm256_mul_ps(q[1], x1);
      p0 = _mm256_fmadd_ps(q[2], x2, p0);
      p1 = _mm256_fmadd_ps(q[3], x3, p1);
      acc[r] = _mm256_fmadd_ps(BroadcastF16(p), _mm256_add_ps(p0, p1), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = HorizontalSum(acc[r]);
}

template <int NR>
void DotRowsQ8_0Avx2(const uint8_t* row, int64_t row_bytes, const float* x, int64_t nblocks,
                     float* out) {
  __m256 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblocks; ++b, row += kQ8_0Bytes, x += kQK) {
    const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
    const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const uint8_t* p = row + r * row_bytes;
      __m256 q[4];
      UnpackQ8(p + 2, q);
      __m256 p0 = _mm256_mul_ps(q[0], x0);
      __m256 p1 = _mm256_mul_ps(q[1], x1);
      p0 = _mm256_fmadd_ps(q[2], x2, p0);
      p1 = _mm256_fmadd_ps(q[3], x3, p1);
      acc[r] = _mm256_fmadd_ps(BroadcastF16(p), _mm256_add_ps(p0, p1), acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = HorizontalSum(acc[r]);
}

// One Q4_1 block of one row into that row's four accumulators: DotQ4_1Avx2's loop body. x is
// read straight from memory (folded into the FMA): 2 rows * 4 accumulators leave no registers.
inline void Q4_1BlockAcc(const uint8_t* p, const float* x, __m256& a0, __m256& a1, __m256& a2,
                         __m256& a3) {
  __m256 q[4];
  UnpackNibbles(p + 4, 0, q);
  uint32_t dm_bits;
  std::memcpy(&dm_bits, p, sizeof dm_bits);
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm_bits)));
  const __m256 d = _mm256_broadcastss_ps(dm);
  const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
  a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[0], d, m), _mm256_loadu_ps(x), a0);
  a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[1], d, m), _mm256_loadu_ps(x + 8), a1);
  a2 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[2], d, m), _mm256_loadu_ps(x + 16), a2);
  a3 = _mm256_fmadd_ps(_mm256_fmadd_ps(q[3], d, m), _mm256_loadu_ps(x + 24), a3);
}

inline float SumQ4_1Acc(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  return HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

template <int NR>
void DotRowsQ4_1Avx2(const uint8_t* row, int64_t row_bytes, const float* x, int64_t nblocks,
                     float* out) {
  static_assert(NR == 1 || NR == 2);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  for (int64_t b = 0; b < nblocks; ++b, row += kQ4_1Bytes, x += kQK) {
    Q4_1BlockAcc(row, x, a0, a1, a2, a3);
    if constexpr (NR == 2) Q4_1BlockAcc(row + row_bytes, x, b0, b1, b2, b3);
  }
  out[0] = SumQ4_1Acc(a0, a1, a2, a3);
  if constexpr (NR == 2) out[1] = SumQ4_1Acc(b0, b1, b2, b3);
}

using DotRowsFn = void (*)(const uint8_t*, int64_t, const float*, int64_t, float*);

// Runs `fn4` (if any) over groups of 4 rows, then `fn2`, then `fn1` on what is left.
void DotRowsGrouped(DotRowsFn fn4, DotRowsFn fn2, DotRowsFn fn1, const uint8_t* rows,
                    int64_t row_bytes, int nrows, const float* x, int64_t nblocks, float* out) {
  int r = 0;
  for (; fn4 != nullptr && r + 4 <= nrows; r += 4) {
    fn4(rows + r * row_bytes, row_bytes, x, nblocks, out + r);
  }
  for (; r + 2 <= nrows; r += 2) fn2(rows + r * row_bytes, row_bytes, x, nblocks, out + r);
  for (; r < nrows; ++r) fn1(rows + r * row_bytes, row_bytes, x, nblocks, out + r);
}

// Loads 8 values of a scalar type as fp32.
template <DType T>
inline __m256 Load8(const uint8_t* p) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (T == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {  // kBF16: widen to 32 bits and shift into the high half.
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

template <DType T>
float DotDenseAvx2(const uint8_t* row, const float* x, int64_t n) {
  constexpr int64_t kEs = T == DType::kF32 ? 4 : 2;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(Load8<T>(row + (i + 8 * k) * kEs), _mm256_loadu_ps(x + i + 8 * k),
                               acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(Load8<T>(row + i * kEs), _mm256_loadu_ps(x + i), acc[0]);
  }
  float sum =
      HorizontalSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  if (i < n) sum += DotScalar(T, row + i * kEs, x + i, n - i);
  return sum;
}

template <DType T>
void DequantDenseAvx2(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, Load8<T>(src + i * 2));
  if (i < n) DequantScalar(T, src + i * 2, dst + i, n - i);
}

// The AVX2 kernels of the types in ggml_kquants.h; null for other types.
struct BlockKernels {
  void (*dequant)(const uint8_t* src, float* dst, int64_t nblocks) = nullptr;
  float (*dot)(const uint8_t* row, const float* x, int64_t nblocks) = nullptr;
};

BlockKernels GgmlKernels(DType t) {
  switch (t) {
    case DType::kQ5_0:
      return {ggml::DequantQ5_0Avx2, ggml::DotQ5_0Avx2};
    case DType::kQ5_1:
      return {ggml::DequantQ5_1Avx2, ggml::DotQ5_1Avx2};
    case DType::kIQ4_NL:
      return {ggml::DequantIQ4_NLAvx2, ggml::DotIQ4_NLAvx2};
    case DType::kQ2_K:
      return {ggml::DequantQ2_KAvx2, ggml::DotQ2_KAvx2};
    case DType::kQ3_K:
      return {ggml::DequantQ3_KAvx2, ggml::DotQ3_KAvx2};
    case DType::kQ4_K:
      return {ggml::DequantQ4_KAvx2, ggml::DotQ4_KAvx2};
    case DType::kQ5_K:
      return {ggml::DequantQ5_KAvx2, ggml::DotQ5_KAvx2};
    case DType::kQ6_K:
      return {ggml::DequantQ6_KAvx2, ggml::DotQ6_KAvx2};
    case DType::kIQ2_XXS:
      return {ggml::DequantIQ2_XXSAvx2, ggml::DotIQ2_XXSAvx2};
    case DType::kIQ3_XXS:
      return {ggml::DequantIQ3_XXSAvx2, ggml::DotIQ3_XXSAvx2};
    case DType::kIQ4_XS:
      return {ggml::DequantIQ4_XSAvx2, ggml::DotIQ4_XSAvx2};
    default:
      return {};
  }
}

#endif  // DQ_GGML_AVX2

}  // namespace

void DequantizeRow(DType t, const uint8_t* src, float* dst, int64_t n) {
  if (n <= 0) return;
#ifdef DQ_GGML_AVX2
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
      return DequantQuantAvx2(t, src, dst, n / kQK);
    case DType::kF16:
      return DequantDenseAvx2<DType::kF16>(src, dst, n);
    case DType::kBF16:
      return DequantDenseAvx2<DType::kBF16>(src, dst, n);
    default:
      if (const BlockKernels k = GgmlKernels(t); k.dequant != nullptr) {
        return k.dequant(src, dst, n / DTypeBlockElems(t));
      }
      break;
  }
#endif
  DequantScalar(t, src, dst, n);
}

float DotRow(DType t, const uint8_t* row, const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
#ifdef DQ_GGML_AVX2
  switch (t) {
    case DType::kQ4_0:
      return DotQ4_0Avx2(row, x, n / kQK);
    case DType::kQ4_1:
      return DotQ4_1Avx2(row, x, n / kQK);
    case DType::kQ8_0:
      return DotQ8_0Avx2(row, x, n / kQK);
    case DType::kF32:
      return DotDenseAvx2<DType::kF32>(row, x, n);
    case DType::kF16:
      return DotDenseAvx2<DType::kF16>(row, x, n);
    case DType::kBF16:
      return DotDenseAvx2<DType::kBF16>(row, x, n);
    default:
      if (const BlockKernels k = GgmlKernels(t); k.dot != nullptr) {
        return k.dot(row, x, n / DTypeBlockElems(t));
      }
      break;
  }
#endif
  return DotScalar(t, row, x, n);
}

void DotRows(DType t, const uint8_t* rows, int64_t row_bytes, int nrows, const float* x, int64_t n,
             float* out) {
#ifdef DQ_GGML_AVX2
  if (n > 0) {
    switch (t) {
      case DType::kQ4_0:
        return DotRowsGrouped(DotRowsQ4_0Avx2<4>, DotRowsQ4_0Avx2<2>, DotRowsQ4_0Avx2<1>, rows,
                              row_bytes, nrows, x, n / kQK, out);
      case DType::kQ4_1:
        return DotRowsGrouped(nullptr, DotRowsQ4_1Avx2<2>, DotRowsQ4_1Avx2<1>, rows, row_bytes,
                              nrows, x, n / kQK, out);
      case DType::kQ8_0:
        return DotRowsGrouped(DotRowsQ8_0Avx2<4>, DotRowsQ8_0Avx2<2>, DotRowsQ8_0Avx2<1>, rows,
                              row_bytes, nrows, x, n / kQK, out);
      default:
        break;
    }
  }
#endif
  for (int r = 0; r < nrows; ++r) out[r] = DotRow(t, rows + r * row_bytes, x, n);
}

}  // namespace dq
