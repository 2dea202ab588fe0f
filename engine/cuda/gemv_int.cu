// Decode GEMV / dequantization for the uniform int2/int3/int4/int8 schemes (int_codec.h),
// read in their stored layout: each row an LSB-first bit stream, F16 scales and U8 zero points
// per group. w' = float(q - z) * s, exactly the CPU reference's one product.
//
// Deleted in issue 18 with its DQ_WO_INT4_M1 knob: a persistent int4 m = 1 kernel (Int4M1Kernel,
// x in shared memory), off by default since it was written. On the H200 (Qwen3-4B step, int4
// g128, m = 1) its first version ran 323 tok/s against the generic kernel's 616, the
// bank-conflict-free one at parity (0.93-1.12x per shape: commit 8bc77d9); and int4 with groups
// of 64 / 128 has since gone to the tile GEMV (gemv_int_tile.cu) before this file is asked.
#include "engine/cuda/weight_only_kernels.cuh"

namespace dq::cuda::wo {
namespace {

template <int kBits>
struct IntFormat {
  // 16 bytes of codes per unit where the width allows (int3: 12 bytes, int8: 32 bytes).
  static constexpr int kUnit = kBits == 2 ? 64 : 32;
  static constexpr int kWords = kBits * kUnit / 32;
  static constexpr int kHalves = kUnit / 32;     // 32-value pieces: each lies in one group
  static constexpr bool kWarpsByK = kBits == 4;  // LaunchGemvM: 8 warps per CTA for long rows
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

// ---------------------------------------------------------------------------------------------
// Tensor-core path for int4 / int2 (IntMmaLayout): the codes are repacked at upload (RepackInt
// in weight_only.cu) so that one 16-byte load per lane feeds mma.sync m16n8k16 directly.
//
// A warp tile is 8 output rows × 16 inputs: x is the A operand (rows = the m ≤ 8 activation
// rows, rows 8..15 zero), the weight tile is B (its 8 columns = output rows), fp32 accumulate.
// Lane (g = lane / 4, t = lane % 4) owns output row g's codes and activation row g. The codes are
// converted exactly to bf16x2 pairs with a shift, one lop3 (the code ORed into the mantissa of
// bf16 128.0) and one packed subtraction of 128 + z (exact: small integers), so each weight
// costs ~1.5 instructions. The group scale is hoisted: the mma chain over one group gives
// Σ (q − z)·x in fp32, multiplied by s once per group (a reordering of the fp32 sums).
//
// Layout of one row (RepackInt): blocks of 64 bytes = kCodes = 512 / bits codes. In a block,
// lane t reads words 4t..4t+3. Mma pair Q (inputs 32Q..32Q+31 of the block) takes from lane t
// the 8 consecutive inputs 32Q + 8t + i8 (mma 2Q + i8 / 4, element i = i8 % 4); mma M lives in
// word v = M / (8 / bits) of lane t, sub-mma h = M % (8 / bits), and element i at code position
// (2h + i / 2) + (i % 2)·P with P = 16 / bits: so pair p of a word (positions p, p + P, i.e. bits
// bits·p and 16 + bits·p) is one bf16x2 register, in the order the mma's k slots want.
__device__ __forceinline__ void MmaBf16(float c[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

constexpr int kMmaWarps = 8;  // warps per CTA, splitting the input dimension of one 8-row tile

template <int kBits, int kGroup, int U>
__global__ void __launch_bounds__(kMmaWarps * 32, 2) IntMmaGemvKernel(const GemvParams p, int m) {
  using L = IntMmaLayoutInfo<kBits>;
  constexpr int kGroupsPerBlock = L::kCodes / kGroup;
  constexpr int kPairsPerGroup = kGroup / 32;
  GridDepLaunch();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t row0 = int64_t{blockIdx.x} * 8;
  const int64_t crow = row0 + g < p.out ? row0 + g : p.out - 1;
  const int64_t srow0 = row0 + 2 * t < p.out ? row0 + 2 * t : p.out - 1;
  const int64_t srow1 = row0 + 2 * t + 1 < p.out ? row0 + 2 * t + 1 : p.out - 1;
  const int nblocks = static_cast<int>(p.in / L::kCodes);
  const uint8_t* cptr = p.codes + crow * p.codes_row + 16 * t;
  const uint8_t* zptr = p.aux + crow * p.aux_row;
  const __half* s0ptr = reinterpret_cast<const __half*>(p.scales + srow0 * p.scales_row);
  const __half* s1ptr = reinterpret_cast<const __half*>(p.scales + srow1 * p.scales_row);
  const bool has_x = g < m;
  const __nv_bfloat16* xrow = p.x + int64_t{has_x ? g : 0} * p.in + 8 * t;
  float acc0 = 0.0f, acc1 = 0.0f;
  bool waited = false;
  for (int base = warp; base < nblocks; base += kMmaWarps * U) {
    uint4 q[U];
    uint32_t zb[U][kGroupsPerBlock];
    float s0[U][kGroupsPerBlock], s1[U][kGroupsPerBlock];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int b = base + kMmaWarps * i;
      if (b < nblocks) {
        q[i] = LoadStream16(cptr + int64_t{b} * 64);
#pragma unroll
        for (int j = 0; j < kGroupsPerBlock; ++j) {
          const int gi = b * kGroupsPerBlock + j;
          zb[i][j] = 0x43004300u + __ldg(zptr + gi) * 0x00010001u;
          s0[i][j] = __half2float(__ldg(s0ptr + gi));
          s1[i][j] = __half2float(__ldg(s1ptr + gi));
        }
      } else {
        q[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < kGroupsPerBlock; ++j) {
          zb[i][j] = 0x43004300u;
          s0[i][j] = s1[i][j] = 0.0f;
        }
      }
    }
    if (!waited) {
      GridDepWait();
      waited = true;
    }
    // Straight-line over the U blocks (blocks past the end have zero x and scales), with the
    // U independent mma chains interleaved.
#pragma unroll
    for (int j = 0; j < kGroupsPerBlock; ++j) {
      float c[U][4];
#pragma unroll
      for (int i = 0; i < U; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.0f;
#pragma unroll
      for (int Qg = 0; Qg < kPairsPerGroup; ++Qg) {
        const int Q = j * kPairsPerGroup + Qg;
        uint4 xv[U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
          const int b = base + kMmaWarps * i;
          xv[i] =
              has_x && b < nblocks
                  ? __ldg(reinterpret_cast<const uint4*>(xrow + int64_t{b} * L::kCodes + 32 * Q))
                  : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int M = 2 * Q + e, v = M / L::kMmaPerWord, h = M % L::kMmaPerWord;
#pragma unroll
          for (int i = 0; i < U; ++i) {
            const uint32_t w = v == 0 ? q[i].x : v == 1 ? q[i].y : v == 2 ? q[i].z : q[i].w;
            const uint32_t b0 = CodePair<kBits>(w, kBits * (2 * h), zb[i][j]);
            const uint32_t b1 = CodePair<kBits>(w, kBits * (2 * h + 1), zb[i][j]);
            MmaBf16(c[i], e ? xv[i].z : xv[i].x, e ? xv[i].w : xv[i].y, b0, b1);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        acc0 = fmaf(s0[i][j], c[i][0], acc0);
        acc1 = fmaf(s1[i][j], c[i][1], acc1);
      }
    }
  }
  if (!waited) GridDepWait();
  __shared__ float red[kMmaWarps - 1][32][2];
  if (warp > 0) {
    red[warp - 1][lane][0] = acc0;
    red[warp - 1][lane][1] = acc1;
  }
  __syncthreads();
  if (warp != 0 || !has_x) return;
#pragma unroll
  for (int k = 0; k < kMmaWarps - 1; ++k) {
    acc0 += red[k][lane][0];
    acc1 += red[k][lane][1];
  }
  const float v[2] = {acc0, acc1};
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int64_t r = row0 + 2 * t + e;
    if (r >= p.out) continue;
    const int64_t idx = int64_t{g} * p.out + r;
    if (p.y_acc != nullptr) {
      p.y_acc[idx] += v[e];
    } else {
      p.y[idx] = __float2bfloat16_rn(v[e]);
    }
  }
}

// DequantizeToBf16 of the repacked layout: one unit = one 64-byte block of a row.
template <int kBits>
struct IntMmaFormat {
  using L = IntMmaLayoutInfo<kBits>;
  static constexpr int kUnit = L::kCodes;
  static constexpr int kPieces = kUnit / 32;
  struct Raw {
    uint32_t q[16];
    float s[kPieces];
    uint32_t z[kPieces];
  };
  __device__ static Raw Load(const GemvParams& p, int64_t row, int u) {
    Raw r;
    const uint8_t* src = p.codes + row * p.codes_row + int64_t{u} * 64;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 v = LoadAligned<uint4>(src + 16 * i);
      r.q[4 * i] = v.x;
      r.q[4 * i + 1] = v.y;
      r.q[4 * i + 2] = v.z;
      r.q[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int h = 0; h < kPieces; ++h) {
      const int64_t g = (int64_t{u} * kUnit + 32 * h) >> p.group_shift;
      r.s[h] = F16BitsToFloat(LoadAligned<uint16_t>(p.scales + row * p.scales_row + 2 * g));
      r.z[h] = p.aux[row * p.aux_row + g];
    }
    return r;
  }
  __device__ static void Decode8(const Raw& r, int c, float w[8]) {
    constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int k = 8 * c + i;
      const uint32_t code = (r.q[L::Word(k)] >> (kBits * L::Pos(k))) & kMask;
      w[i] = __fmul_rn(IntDiff(code, r.z[k / 32]), r.s[k / 32]);
    }
  }
};

template <int kBits, int kGroup>
void LaunchIntMma(const GemvParams& p, int m, cudaStream_t stream) {
  constexpr int U = kBits == 4 ? 4 : 2;
  detail::LaunchPdl(IntMmaGemvKernel<kBits, kGroup, U>,
                    dim3(static_cast<unsigned>((p.out + 7) / 8)), dim3(kMmaWarps * 32), 0, stream,
                    p, m);
}

template <int kBits>
void RunIntMma(const GemvParams& p, int m, __nv_bfloat16* dequant_out, cudaStream_t stream) {
  if (dequant_out != nullptr) return LaunchDequant<IntMmaFormat<kBits>>(p, dequant_out, stream);
  switch (p.group_shift) {
    case 5:
      return LaunchIntMma<kBits, 32>(p, m, stream);
    case 6:
      return LaunchIntMma<kBits, 64>(p, m, stream);
    default:
      return LaunchIntMma<kBits, 128>(p, m, stream);
  }
}

}  // namespace

bool LaunchIntFamily(int bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                     cudaStream_t stream) {
  if (LaunchIntTile(bits, p, m, dequant_out, stream)) return true;
  if (IntMmaLayout(bits, 1 << p.group_shift, p.in)) {
    if (bits == 4) {
      RunIntMma<4>(p, m, dequant_out, stream);
    } else {
      RunIntMma<2>(p, m, dequant_out, stream);
    }
    return true;
  }
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
