// Decode GEMV / dequantization for the uniform int2/int3/int4/int8 schemes (int_codec.h),
// read in their stored layout: each row an LSB-first bit stream, F16 scales and U8 zero points
// per group. w' = float(q - z) * s, exactly the CPU reference's one product.
#include "engine/cuda/weight_only_kernels.cuh"

namespace dq::cuda::wo {
namespace {

template <int kBits>
struct IntFormat {
  // 16 bytes of codes per unit where the width allows (int3: 12 bytes, int8: 32 bytes).
  static constexpr int kUnit = kBits == 2 ? 64 : 32;
  static constexpr int kWords = kBits * kUnit / 32;
  static constexpr int kHalves = kUnit / 32;  // 32-value pieces: each lies in one group
  struct Raw {
    uint32_t q[kWords];
    float s[kHalves];
    uint32_t z[kHalves];
  };

  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint8_t* src = p.codes + row * p.codes_row + int64_t{u} * (kWords * 4);
    if constexpr (kBits == 3) {
#pragma unroll
      for (int i = 0; i < 3; ++i) r.q[i] = LoadAligned<uint32_t>(src + 4 * i);
    } else {
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i) {
        const uint4 v = LoadAligned<uint4>(src + 16 * i);
        r.q[4 * i] = v.x;
        r.q[4 * i + 1] = v.y;
        r.q[4 * i + 2] = v.z;
        r.q[4 * i + 3] = v.w;
      }
    }
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int64_t g = (int64_t{u} * kUnit + 32 * h) >> p.group_shift;
      r.s[h] = F16BitsToFloat(LoadAligned<uint16_t>(p.scales + row * p.scales_row + 2 * g));
      r.z[h] = p.aux[row * p.aux_row + g];  // the whole byte: GPTQ v1 imports may hold 2^bits
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
      w[i] = __fmul_rn(IntDiff(code, r.z[k / 32]), r.s[k / 32]);
    }
  }
};

}  // namespace

bool LaunchIntFamily(int bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                     cudaStream_t stream) {
  switch (bits) {
    case 2:
      RunFormat<IntFormat<2>>(p, m, dequant_out, stream);
      return true;
    case 3:
      RunFormat<IntFormat<3>>(p, m, dequant_out, stream);
      return true;
    case 4:
      RunFormat<IntFormat<4>>(p, m, dequant_out, stream);
      return true;
    case 8:
      RunFormat<IntFormat<8>>(p, m, dequant_out, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace dq::cuda::wo
