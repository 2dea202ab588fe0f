// The weight-only decode GEMV and dequantize kernels, generic over a format "trait" F that says
// how one unit of F::kUnit consecutive inputs of one row is loaded (F::Load: the packed codes
// plus that unit's scales, as few 16-byte loads as the layout allows) and how each 8-value chunk
// of it is decoded to fp32 (F::Decode8: exactly the CPU reference's values, with explicit
// __fmul_rn / __fadd_rn so that no FMA contraction changes a rounding).
//
// GEMV: one warp owns R consecutive output rows; its lanes stride over the row's units, keeping
// U units per lane in flight, and every decoded weight is reused for all M activation rows
// (x is read through L1, 16 bytes at a time). A warp-shuffle reduction ends each row.
// Launches use programmatic dependent launch: the first weight loads are issued before
// griddepcontrol.wait, so a GEMV that follows another kernel streams its weights while that
// kernel drains; x and y are only touched after the wait.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_options.h"
#include "engine/cuda/kernel_util.cuh"

namespace dq::cuda::wo {

// Everything a kernel needs, row strides in bytes.
struct GemvParams {
  const uint8_t* codes = nullptr;
  int64_t codes_row = 0;
  const uint8_t* scales = nullptr;
  int64_t scales_row = 0;
  const uint8_t* aux = nullptr;
  int64_t aux_row = 0;
  int64_t out = 0;
  int64_t in = 0;
  int group_shift = 0;  // log2(group size) where groups vary (int formats)
  float global = 1.0f;  // nvfp4 / lut: the stored global scale G (dequantization divides by it)
  const __nv_bfloat16* x = nullptr;
  __nv_bfloat16* y = nullptr;
  float* y_acc = nullptr;
  IntTileOptions int_tile;  // LaunchIntTile's kernel choices (WeightOnlyGemvArgs::int_tile)
};

__device__ __forceinline__ void GridDepWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void GridDepLaunch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Exact float of a small non-negative integer (< 2^23) without an I2F: 2^23 + v, minus 2^23.
__device__ __forceinline__ float SmallIntToFloat(uint32_t v) {
  return __fsub_rn(__uint_as_float(0x4B000000u | v), 8388608.0f);
}
// Exact float(a - b) for integers 0 <= a, b < 2^23.
__device__ __forceinline__ float IntDiff(uint32_t a, uint32_t b) {
  return __fsub_rn(__uint_as_float(0x4B000000u | a), __uint_as_float(0x4B000000u | b));
}

__device__ __forceinline__ float F16BitsToFloat(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float E4M3ToFloatDev(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// 16 bytes of x (8 bf16) as fp32.
__device__ __forceinline__ void LoadX8(const __nv_bfloat16* p, float v[8]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

// 16 bytes of streamed weights: read once, so not kept in L1.
__device__ __forceinline__ uint4 LoadStream16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// bf16x2 of (q_lo - z, q_hi - z) for the kBits-bit codes at bits `shift` and 16 + `shift` of w
// (the codes ORed into the mantissa of bf16 128.0 by one lop3, then one packed subtraction of
// zb = bf16x2 (128 + z); exact: small integers). The tensor-core int GEMVs' decode.
template <int kBits>
__device__ __forceinline__ uint32_t CodePair(uint32_t w, int shift, uint32_t zb) {
  constexpr uint32_t kMask = ((1u << kBits) - 1) * 0x00010001u;
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w >> shift), "r"(kMask), "r"(0x43004300u));
  const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&r),
                                   *reinterpret_cast<const __nv_bfloat162*>(&zb));
  return *reinterpret_cast<const uint32_t*>(&d);
}

template <typename T>
__device__ __forceinline__ T LoadAligned(const uint8_t* p) {
  return __ldg(reinterpret_cast<const T*>(p));
}

constexpr int kWarpsPerCta = 4;

template <class F, int M, int R, int U, int W = kWarpsPerCta>
__global__ void __launch_bounds__(W * 32) GemvKernel(const GemvParams p) {
  GridDepLaunch();
  const int lane = threadIdx.x & 31;
  const int64_t warp = int64_t{blockIdx.x} * W + (threadIdx.x >> 5);
  const int64_t row0 = warp * R;
  if (row0 >= p.out) return;
  int64_t rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) rows[r] = row0 + r < p.out ? row0 + r : p.out - 1;
  const int units = static_cast<int>(p.in / F::kUnit);
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
  bool waited = false;
  for (int base = lane; base < units; base += 32 * U) {
    typename F::Raw raw[U][R];
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = base + 32 * i;
      if (u < units) {
#pragma unroll
        for (int r = 0; r < R; ++r) raw[i][r] = F::Load(p, rows[r], u);
      }
    }
    if (!waited) {
      GridDepWait();
      waited = true;
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
      const int u = base + 32 * i;
      if (u >= units) break;
#pragma unroll
      for (int c = 0; c < F::kUnit / 8; ++c) {
        float w[R][8];
#pragma unroll
        for (int r = 0; r < R; ++r) F::Decode8(raw[i][r], c, w[r]);
        const int64_t xoff = int64_t{u} * F::kUnit + 8 * c;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          float xv[8];
          LoadX8(p.x + m * p.in + xoff, xv);
#pragma unroll
          for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int k = 0; k < 8; ++k) acc[r][m] = fmaf(w[r][k], xv[k], acc[r][m]);
          }
        }
      }
    }
  }
  if (!waited) GridDepWait();
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = acc[r][m];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      // Lane (r * M + m) % 32 writes this sum, so the stores spread over the warp.
      if (lane == (r * M + m) % 32 && row0 + r < p.out) {
        const int64_t idx = m * p.out + row0 + r;
        if (p.y_acc != nullptr) {
          p.y_acc[idx] += v;
        } else {
          p.y[idx] = __float2bfloat16_rn(v);
        }
      }
    }
  }
}

// One thread per (row, unit): the unit decoded and written as bf16 [out, in].
template <class F>
__global__ void DequantKernel(const GemvParams p, __nv_bfloat16* out) {
  const int64_t units = p.in / F::kUnit;
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= p.out * units) return;
  const int64_t row = t / units;
  const int u = static_cast<int>(t % units);
  const typename F::Raw raw = F::Load(p, row, u);
  __nv_bfloat16* dst = out + row * p.in + int64_t{u} * F::kUnit;
#pragma unroll
  for (int c = 0; c < F::kUnit / 8; ++c) {
    float w[8];
    F::Decode8(raw, c, w);
    uint32_t packed[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 b = __floats2bfloat162_rn(w[2 * k], w[2 * k + 1]);
      packed[k] = *reinterpret_cast<const uint32_t*>(&b);
    }
    *reinterpret_cast<uint4*>(dst + 8 * c) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// Rows per warp and units in flight per lane, by batch size.
template <int M>
struct GemvShape {
  static constexpr int kRows = M == 1 ? 1 : (M <= 4 ? 2 : 4);
  static constexpr int kUnroll = M == 1 ? 4 : 2;
};

template <class F, int M, int W, int U = GemvShape<M>::kUnroll>
void LaunchGemvMWU(const GemvParams& p, cudaStream_t stream) {
  constexpr int R = GemvShape<M>::kRows;
  const int64_t warps = (p.out + R - 1) / R;
  detail::LaunchPdl(GemvKernel<F, M, R, U, W>, dim3(static_cast<unsigned>((warps + W - 1) / W)),
                    dim3(W * 32), 0, stream, p);
}

template <class F, int M, int W>
void LaunchGemvMW(const GemvParams& p, cudaStream_t stream) {
  LaunchGemvMWU<F, M, W>(p, stream);
}

// Warps per CTA by row length, for formats whose trait sets kWarpsByK (int4): for m = 1, rows of
// 4096+ inputs (Qwen3-4B o, down) take 8 warps per CTA, shorter ones (qkv, gate_up) 4. An earlier
// H200 experiment gave ~680 tok/s for the int4 g128 Qwen3-4B step (617 with 4 everywhere); this
// exact code has not been timed yet.
inline constexpr int64_t kWideCtaMinIn = 4096;
template <class F, int M>
void LaunchGemvM(const GemvParams& p, cudaStream_t stream) {
  if constexpr (M == 1 && requires { F::kWarpsByK; }) {
    if (F::kWarpsByK && p.in >= kWideCtaMinIn) return LaunchGemvMW<F, M, 8>(p, stream);
  }
  LaunchGemvMW<F, M, kWarpsPerCta>(p, stream);
}

// y = x · Wᵀ for 1 <= m <= 8 with the format trait F.
template <class F>
void LaunchGemv(const GemvParams& p, int m, cudaStream_t stream) {
  switch (m) {
    case 1:
      return LaunchGemvM<F, 1>(p, stream);
    case 2:
      return LaunchGemvM<F, 2>(p, stream);
    case 3:
      return LaunchGemvM<F, 3>(p, stream);
    case 4:
      return LaunchGemvM<F, 4>(p, stream);
    case 5:
      return LaunchGemvM<F, 5>(p, stream);
    case 6:
      return LaunchGemvM<F, 6>(p, stream);
    case 7:
      return LaunchGemvM<F, 7>(p, stream);
    default:
      return LaunchGemvM<F, 8>(p, stream);
  }
}

template <class F>
void LaunchDequant(const GemvParams& p, __nv_bfloat16* out, cudaStream_t stream) {
  const int64_t n = p.out * (p.in / F::kUnit);
  constexpr int kThreads = 256;
  DequantKernel<F>
      <<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p, out);
  CUDA_CHECK_LAUNCH();
}

// The dequantization with `dequant_out`, else the GEMV.
template <class F>
void RunFormat(const GemvParams& p, int m, __nv_bfloat16* dequant_out, cudaStream_t stream) {
  if (dequant_out != nullptr) {
    LaunchDequant<F>(p, dequant_out, stream);
  } else {
    LaunchGemv<F>(p, m, stream);
  }
}

// The tiled tensor-core layout of int4 / int2 with groups of 64 or 128 (gemv_int_tile.cu
// describes it; RepackIntTile in weight_only.cu builds it): rows in tiles of 16, a row length a
// whole number of chunks of IntTileChunkK inputs.
__host__ __device__ constexpr int IntTileChunkK(int bits) { return 256 / bits; }
inline bool IntTileLayout(int bits, int group, int64_t in) {
  return (bits == 4 || bits == 2) && (group == 64 || group == 128) && in % IntTileChunkK(bits) == 0;
}
// Where the code of (row, input k) lives in that layout: byte offset of its 32-bit word and the
// bit inside the word. Scales: u32 (f16 scale bits | zero point << 16) at
// ((tile * groups + k / group) * 8 + row % 8) * 2 + (row % 16) / 8.
struct IntTilePos {
  int64_t word_byte;
  int bit;
};
inline IntTilePos IntTileCodePos(int bits, int64_t in, int64_t row, int64_t k) {
  const int64_t chunk_k = IntTileChunkK(bits), nchunks = in / chunk_k;
  const int64_t tile = row / 16, c = k / chunk_k;
  const int rr = static_cast<int>(row % 16), g = rr % 8, hi = rr / 8;
  const int kk = static_cast<int>(k % chunk_k), sub = kk / 64, k64 = kk % 64;
  const int t = k64 / 16, ii = (k64 % 16) / 4, j = k64 % 4;
  const int lane = 4 * g + t, mma = 4 * sub + ii, pair = 2 * (j / 2) + hi;
  // Pairs 4 bits apart; int2 interleaves two mmas' fields in one word (see ChunkMma).
  const int word = bits == 4 ? mma : mma / 2;
  const int base = bits == 4 ? 0 : 2 * (mma % 2);
  return {((tile * nchunks + c) * 32 + lane) * 16 + 4 * word, base + 4 * pair + 16 * (j % 2)};
}

// The device's SM count (cached).
inline int SmCount() {
  static const int n = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

// GEMV / dequantization in the tiled layout; false when `p` is not in it.
bool LaunchIntTile(int bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                   cudaStream_t stream);

// Whether an int matrix uses the older tensor-core GEMV and its repacked code layout (gemv_int.cu
// describes it; weight_only.cu repacks at upload): int2 with groups of 32 (larger groups take the
// tiled layout above), whole 64-byte blocks per row.
// int4 is kept on the SIMT path for now: on H200 (Qwen3-4B step, streamed) the tensor-core
// kernel ran int4 g128 at 574 tok/s for m = 1 (SIMT 617) but 527 for m = 8 (SIMT 235); int4
// g64 / g32 lost more at m = 1. int2 gained at both (g64 m = 1: 376 -> 536, m = 8: 137 -> 484).
inline constexpr bool kInt4Mma = false;
inline bool IntMmaLayout(int bits, int group, int64_t in) {
  return !IntTileLayout(bits, group, in) && ((bits == 4 && kInt4Mma) || bits == 2) &&
         (group == 32 || group == 64 || group == 128) && in % (512 / bits) == 0;
}

// Where input k (0..kCodes-1) of a 64-byte block lives in that layout.
template <int kBits>
struct IntMmaLayoutInfo {
  static constexpr int kCodes = 512 / kBits;  // codes per 64-byte block
  static constexpr int kPairs = kCodes / 32;  // mma pairs per block
  static constexpr int kMmaPerWord = 8 / kBits;
  static constexpr int kP = 16 / kBits;
  // Word (0..15) and code position of input k (0..kCodes-1) of a block.
  __host__ __device__ static constexpr int Word(int k) {
    return 4 * ((k % 32) / 8) + (2 * (k / 32) + (k % 8) / 4) / kMmaPerWord;
  }
  __host__ __device__ static constexpr int Pos(int k) {
    const int m = 2 * (k / 32) + (k % 8) / 4, h = m % kMmaPerWord, i = k % 4;
    return (2 * h + i / 2) + (i % 2) * kP;
  }
};

// Per-family launchers (gemv_*.cu): with `dequant_out` set they write the bf16 matrix, else
// they run the GEMV for `m` rows. Each returns false for a variant it does not have.
bool LaunchIntFamily(int bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                     cudaStream_t stream);
bool LaunchNvfp4LutFamily(int lut_bits, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                          cudaStream_t stream);  // lut_bits 0: nvfp4
bool LaunchGgufFamily(int gguf_dtype, const GemvParams& p, int m, __nv_bfloat16* dequant_out,
                      cudaStream_t stream);

}  // namespace dq::cuda::wo
