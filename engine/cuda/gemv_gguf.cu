// Decode GEMV / dequantization for GGUF blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) and plain bf16.
// UploadWeightOnly splits the blocks into planes (weight_only.cu), so that codes are 16-byte
// aligned and scales sit in their own rows:
//   Q4_0 / Q4_1: codes = the 16 qs bytes of each block; scales = d (Q4_1: d, m) as f16.
//   Q8_0: codes = the 32 int8 of each block; scales = d.
//   Q4_K: codes = the 128 qs bytes of each super-block; scales = its 16-byte header
//         (d, dmin, 12 packed 6-bit scales/mins).
//   Q6_K: per 32 values, codes = 16 bytes of low nibbles (value l in nibble l / 16 of byte
//         l % 16) and aux = 8 bytes of high 2-bit pairs (value l at bits 2l); scales = the 16
//         int8 sub-block scales of each super-block, then (after all of them) one f16 d each.
// Values are computed with ggml's fp32 operations and rounding order (ggml_kquants.h).
#include "common/dtype.h"
#include "engine/cuda/weight_only_kernels.cuh"

namespace dq::cuda::wo {
namespace {

__device__ __forceinline__ void Unpack4(const uint4 v, uint32_t* q) {
  q[0] = v.x;
  q[1] = v.y;
  q[2] = v.z;
  q[3] = v.w;
}

// Nibble of value k (0..31) in Q4_0 order: byte k % 16, high nibble for k >= 16.
__device__ __forceinline__ uint32_t Q4Nibble(const uint32_t* q, int k) {
  const int j = k % 16;
  return (q[j / 4] >> (8 * (j % 4) + 4 * (k / 16))) & 15u;
}

template <bool kHasMin>
struct Q4Format {  // Q4_0 (x = (q - 8) d) and Q4_1 (x = q d + m, product rounded first)
  static constexpr int kUnit = 32;
  struct Raw {
    uint32_t q[4];
    float d, m;
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    Unpack4(LoadAligned<uint4>(p.codes + row * p.codes_row + int64_t{u} * 16), r.q);
    if constexpr (kHasMin) {
      const uint32_t dm = LoadAligned<uint32_t>(p.scales + row * p.scales_row + int64_t{u} * 4);
      r.d = F16BitsToFloat(dm & 0xFFFF);
      r.m = F16BitsToFloat(dm >> 16);
    } else {
      r.d = F16BitsToFloat(LoadAligned<uint16_t>(p.scales + row * p.scales_row + int64_t{u} * 2));
      r.m = 0.0f;
    }
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t nib = Q4Nibble(r.q, 8 * c + i);
      if constexpr (kHasMin) {
        w[i] = __fadd_rn(__fmul_rn(SmallIntToFloat(nib), r.d), r.m);
      } else {
        w[i] = __fmul_rn(IntDiff(nib, 8), r.d);
      }
    }
  }
};

struct Q8_0Format {
  static constexpr int kUnit = 32;
  struct Raw {
    uint32_t q[8];
    float d;
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint8_t* src = p.codes + row * p.codes_row + int64_t{u} * 32;
    Unpack4(LoadAligned<uint4>(src), r.q);
    Unpack4(LoadAligned<uint4>(src + 16), r.q + 4);
    r.d = F16BitsToFloat(LoadAligned<uint16_t>(p.scales + row * p.scales_row + int64_t{u} * 2));
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = 8 * c + i;
      const uint32_t b = (r.q[k / 4] >> (8 * (k % 4))) & 0xFF;
      w[i] = __fmul_rn(IntDiff(b ^ 0x80u, 128), r.d);  // (b ^ 0x80) - 128 = int8(b)
    }
  }
};

// Byte i of the 12 packed Q4_K scale bytes held in three words (run-time i, no local array).
__device__ __forceinline__ uint32_t ScaleByte(uint32_t s0, uint32_t s1, uint32_t s2, int i) {
  const uint32_t w = i < 4 ? s0 : (i < 8 ? s1 : s2);
  return (w >> (8 * (i & 3))) & 0xFF;
}

struct Q4KFormat {  // unit = 64 values: sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles)
  static constexpr int kUnit = 64;
  struct Raw {
    uint32_t q[8];
    float dl[2], ml[2];
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint8_t* src = p.codes + row * p.codes_row + int64_t{u} * 32;
    Unpack4(LoadAligned<uint4>(src), r.q);
    Unpack4(LoadAligned<uint4>(src + 16), r.q + 4);
    const uint4 h = LoadAligned<uint4>(p.scales + row * p.scales_row + int64_t{u / 4} * 16);
    const float d = F16BitsToFloat(h.x & 0xFFFF), dmin = F16BitsToFloat(h.x >> 16);
    const int c = u % 4;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int j = 2 * c + k;
      uint32_t sc, mn;
      if (j < 4) {
        sc = ScaleByte(h.y, h.z, h.w, j) & 63;
        mn = ScaleByte(h.y, h.z, h.w, j + 4) & 63;
      } else {
        sc = (ScaleByte(h.y, h.z, h.w, j + 4) & 15) | ((ScaleByte(h.y, h.z, h.w, j - 4) >> 6) << 4);
        mn = (ScaleByte(h.y, h.z, h.w, j + 4) >> 4) | ((ScaleByte(h.y, h.z, h.w, j) >> 6) << 4);
      }
      r.dl[k] = __fmul_rn(d, SmallIntToFloat(sc));
      r.ml[k] = __fmul_rn(dmin, SmallIntToFloat(mn));
    }
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = 8 * c + i, half = k / 32, l = k % 32;
      const uint32_t nib = (r.q[l / 4] >> (8 * (l % 4) + 4 * half)) & 15u;
      w[i] = __fsub_rn(__fmul_rn(r.dl[half], SmallIntToFloat(nib)), r.ml[half]);
    }
  }
};

struct Q6KFormat {
  static constexpr int kUnit = 32;
  struct Raw {
    uint32_t lo[4];
    uint32_t hi[2];
    float dl[2];
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    Unpack4(LoadAligned<uint4>(p.codes + row * p.codes_row + int64_t{u} * 16), r.lo);
    const uint2 h = LoadAligned<uint2>(p.aux + row * p.aux_row + int64_t{u} * 8);
    r.hi[0] = h.x;
    r.hi[1] = h.y;
    const uint8_t* srow = p.scales + row * p.scales_row;
    const uint32_t sc = LoadAligned<uint16_t>(srow + int64_t{u} * 2);
    const float d = F16BitsToFloat(LoadAligned<uint16_t>(srow + p.in / 16 + int64_t{u / 8} * 2));
    r.dl[0] = __fmul_rn(d, IntDiff((sc & 0xFF) ^ 0x80u, 128));
    r.dl[1] = __fmul_rn(d, IntDiff((sc >> 8) ^ 0x80u, 128));
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int l = 8 * c + i;
      const uint32_t low = Q4Nibble(r.lo, l);
      const uint32_t high = (r.hi[l / 16] >> (2 * (l % 16))) & 3u;
      w[i] = __fmul_rn(r.dl[l / 16], IntDiff(low | high << 4, 32));
    }
  }
};

struct Bf16Format {
  static constexpr int kUnit = 8;
  struct Raw {
    uint4 v;
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    return {LoadAligned<uint4>(p.codes + row * p.codes_row + int64_t{u} * 16)};
  }
  __device__ static void Decode8(const Raw& r, int, float w[8]) {
    const uint32_t q[4] = {r.v.x, r.v.y, r.v.z, r.v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[2 * i] = __uint_as_float(q[i] << 16);
      w[2 * i + 1] = __uint_as_float(q[i] & 0xFFFF0000u);
    }
  }
};

}  // namespace

bool LaunchGgufFamily(int gguf_dtype, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                      cudaStream_t stream) {
  switch (static_cast<DType>(gguf_dtype)) {
    case DType::kQ4_0:
      RunFormat<Q4Format<false>>(p, m, dequant_out, stream);
      return true;
    case DType::kQ4_1:
      RunFormat<Q4Format<true>>(p, m, dequant_out, stream);
      return true;
    case DType::kQ8_0:
      RunFormat<Q8_0Format>(p, m, dequant_out, stream);
      return true;
    case DType::kQ4_K:
      RunFormat<Q4KFormat>(p, m, dequant_out, stream);
      return true;
    case DType::kQ6_K:
      RunFormat<Q6KFormat>(p, m, dequant_out, stream);
      return true;
    case DType::kBF16:
      RunFormat<Bf16Format>(p, m, dequant_out, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace dq::cuda::wo
