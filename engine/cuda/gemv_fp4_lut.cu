// Decode GEMV / dequantization for nvfp4 (NVFP4A16) and lut3 / lut2, read in their stored
// layout: codes as an LSB-first stream per row, one E4M3 scale per 16 inputs, and the stored
// per-tensor global G. The block step is e = E4M3(s) / G (one fp32 division) and
// w' = value(code) * e (one fp32 product), exactly as the CPU references compute them.
#include "engine/cuda/weight_only_kernels.cuh"
#include "engine/quant/lut_codec.h"

namespace dq::cuda::wo {
namespace {

// E2M1 nibble -> fp32, exact: the magnitude code's 3 bits placed at float bits 22..24 give
// 2^(e-127) (1 + m/2) (or m 2^-127 as a subnormal for e = 0), and 2^126 scales that to the
// E2M1 value; the sign goes straight into bit 31.
__device__ __forceinline__ float E2M1ToFloatDev(uint32_t nib) {
  return __fmul_rn(__uint_as_float(((nib & 7u) << 22) | ((nib & 8u) << 28)), 0x1p126f);
}

struct Nvfp4Format {
  static constexpr int kUnit = 32;
  struct Raw {
    uint32_t q[4];
    float e[2];
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint4 v = LoadAligned<uint4>(p.codes + row * p.codes_row + int64_t{u} * 16);
    r.q[0] = v.x;
    r.q[1] = v.y;
    r.q[2] = v.z;
    r.q[3] = v.w;
    const uint32_t s = LoadAligned<uint16_t>(p.scales + row * p.scales_row + int64_t{u} * 2);
    r.e[0] = __fdiv_rn(E4M3ToFloatDev(s & 0xFF), p.global);
    r.e[1] = __fdiv_rn(E4M3ToFloatDev(s >> 8), p.global);
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = 8 * c + i;
      w[i] = __fmul_rn(E2M1ToFloatDev(r.q[k / 8] >> (4 * (k % 8))), r.e[k / 16]);
    }
  }
};

// The grids as fp32 literals (a function, as device code cannot read host constexpr arrays;
// checked against lut_codec.h below).
__host__ __device__ constexpr float L3(int i) {
  return i == 0   ? -4.7038f
         : i == 1 ? -2.8698f
         : i == 2 ? -1.3696f
         : i == 3 ? 0.0f
         : i == 4 ? 1.2204f
         : i == 5 ? 2.5285f
         : i == 6 ? 4.0473f
                  : 6.0f;
}
__host__ __device__ constexpr float L2(int i) {
  return i == 0 ? -3.6517f : i == 1 ? 0.0f : i == 2 ? 2.5227f : 6.0f;
}
static_assert(L3(0) == kLut3Levels[0] && L3(1) == kLut3Levels[1] && L3(2) == kLut3Levels[2] &&
              L3(3) == kLut3Levels[3] && L3(4) == kLut3Levels[4] && L3(5) == kLut3Levels[5] &&
              L3(6) == kLut3Levels[6] && L3(7) == kLut3Levels[7]);
static_assert(L2(0) == kLut2Levels[0] && L2(1) == kLut2Levels[1] && L2(2) == kLut2Levels[2] &&
              L2(3) == kLut2Levels[3]);

// The level of `code` by a select tree on its bits (no indexed array, so no local memory).
template <int kBits>
__device__ __forceinline__ float LutLevel(uint32_t c) {
  if constexpr (kBits == 2) {
    const float lo = (c & 1) ? L2(1) : L2(0);
    const float hi = (c & 1) ? L2(3) : L2(2);
    return (c & 2) ? hi : lo;
  } else {
    const float a = (c & 1) ? L3(1) : L3(0);
    const float b = (c & 1) ? L3(3) : L3(2);
    const float d = (c & 1) ? L3(5) : L3(4);
    const float e = (c & 1) ? L3(7) : L3(6);
    const float lo = (c & 2) ? b : a;
    const float hi = (c & 2) ? e : d;
    return (c & 4) ? hi : lo;
  }
}

template <int kBits>
struct LutFormat {
  static constexpr int kUnit = kBits == 2 ? 64 : 32;
  static constexpr int kWords = kBits * kUnit / 32;
  static constexpr int kBlocks = kUnit / 16;
  struct Raw {
    uint32_t q[kWords];
    float e[kBlocks];
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint8_t* src = p.codes + row * p.codes_row + int64_t{u} * (kWords * 4);
    const uint8_t* sc = p.scales + row * p.scales_row + int64_t{u} * kBlocks;
    uint32_t s;
    if constexpr (kBits == 2) {
      const uint4 v = LoadAligned<uint4>(src);
      r.q[0] = v.x;
      r.q[1] = v.y;
      r.q[2] = v.z;
      r.q[3] = v.w;
      s = LoadAligned<uint32_t>(sc);
    } else {
#pragma unroll
      for (int i = 0; i < 3; ++i) r.q[i] = LoadAligned<uint32_t>(src + 4 * i);
      s = LoadAligned<uint16_t>(sc);
    }
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
      r.e[b] = __fdiv_rn(E4M3ToFloatDev((s >> (8 * b)) & 0xFF), p.global);
    }
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
    constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = 8 * c + i, bit = k * kBits, word = bit / 32, off = bit % 32;
      uint32_t code;
      if (off + kBits > 32) {
        code = __funnelshift_r(r.q[word], r.q[word + 1], off) & kMask;
      } else {
        code = (r.q[word] >> off) & kMask;
      }
      w[i] = __fmul_rn(LutLevel<kBits>(code), r.e[k / 16]);
    }
  }
};

}  // namespace

bool LaunchNvfp4LutFamily(int lut_bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                          cudaStream_t stream) {
  switch (lut_bits) {
    case 0:
      RunFormat<Nvfp4Format>(p, m, dequant_out, stream);
      return true;
    case 2:
      RunFormat<LutFormat<2>>(p, m, dequant_out, stream);
      return true;
    case 3:
      RunFormat<LutFormat<3>>(p, m, dequant_out, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace dq::cuda::wo
