#include <cuda_fp16.h>

#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "engine/cuda/act_quant.h"
#include "engine/cuda/cuda_check.h"
#include "engine/quant/nvfp4_scale_layout.h"

namespace dq::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float FiniteAbs(float v) {
  const float a = fabsf(v);
  return a <= FLT_MAX ? a : 0.0f;  // NaN and inf are left out of every amax
}

// Max over the CTA; every thread gets the result. `smem` holds 32 floats.
__device__ float BlockMax(float v, float* smem) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? smem[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  return smem[0];
}

// Eight consecutive bf16 as floats; one 16-byte load when kVec.
template <bool kVec>
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float* f) {
  if constexpr (kVec) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __bfloat162float(p[i]);
  }
}

__device__ __forceinline__ uint8_t ToE4M3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float FromE4M3(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(code, __NV_E4M3);
  return __half2float(__half(h));
}

// Rows whose length is a multiple of 8 (kVec: 16-byte aligned input) go 8 values at a time;
// others one by one (kVec false, chunk 1).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    QuantizeFp8Kernel(const __nv_bfloat16* x, int64_t n, __nv_fp8_e4m3* q, float* scale) {
  __shared__ float smem[32];
  const __nv_bfloat16* row = x + blockIdx.x * n;
  uint8_t* qrow = reinterpret_cast<uint8_t*>(q) + blockIdx.x * n;
  constexpr int kChunk = kVec ? 8 : 1;
  const int64_t chunks = n / kChunk;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    if constexpr (kVec) {
      Load8<true>(row + c * 8, f);
    } else {
      f[0] = __bfloat162float(row[c]);
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) amax = fmaxf(amax, FiniteAbs(f[i]));
  }
  amax = BlockMax(amax, smem);
  float s = __fdiv_rn(amax, 448.0f);
  if (s == 0.0f) s = FLT_EPSILON;
  if (threadIdx.x == 0) scale[blockIdx.x] = s;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    if constexpr (kVec) {
      float f[8];
      Load8<true>(row + c * 8, f);
      uint8_t b[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) b[i] = ToE4M3(__fdiv_rn(f[i], s));
      *reinterpret_cast<uint2*>(qrow + c * 8) = *reinterpret_cast<const uint2*>(b);
    } else {
      qrow[c] = ToE4M3(__fdiv_rn(__bfloat162float(row[c]), s));
    }
  }
}

// SwiGluKernel's product (elementwise.cu), the same float operations.
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

// One CTA per row: the row's bf16 SwiGLU values are kept in shared memory between the amax and
// the quantization pass.
__global__ void __launch_bounds__(kThreads) SwiGluQuantizeFp8Kernel(SwiGluFp8Args a) {
  extern __shared__ uint4 vrow[];  // [n / 8] x 8 bf16
  __shared__ float smem[32];
  const __nv_bfloat16* g = a.gate + blockIdx.x * a.in_stride;
  const __nv_bfloat16* u = a.up + blockIdx.x * a.in_stride;
  const int64_t chunks = a.n / 8;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    const uint4 gr = *reinterpret_cast<const uint4*>(g + c * 8);
    const uint4 ur = *reinterpret_cast<const uint4*>(u + c * 8);
    const __nv_bfloat162* gh = reinterpret_cast<const __nv_bfloat162*>(&gr);
    const __nv_bfloat162* uh = reinterpret_cast<const __nv_bfloat162*>(&ur);
    uint4 out;
    __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 gf = __bfloat1622float2(gh[j]), uf = __bfloat1622float2(uh[j]);
      oh[j] = __floats2bfloat162_rn(Silu(gf.x) * uf.x, Silu(gf.y) * uf.y);
      const float2 of = __bfloat1622float2(oh[j]);
      amax = fmaxf(amax, fmaxf(FiniteAbs(of.x), FiniteAbs(of.y)));
    }
    vrow[c] = out;
  }
  amax = BlockMax(amax, smem);  // its barriers also publish vrow
  float s = __fdiv_rn(amax, 448.0f);
  if (s == 0.0f) s = FLT_EPSILON;
  if (threadIdx.x == 0) a.scale[blockIdx.x] = s;
  uint8_t* qrow = reinterpret_cast<uint8_t*>(a.q) + blockIdx.x * a.n;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
    float f[8];
    Load8<true>(reinterpret_cast<const __nv_bfloat16*>(vrow + c), f);
    uint8_t b[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) b[i] = ToE4M3(__fdiv_rn(f[i], s));
    *reinterpret_cast<uint2*>(qrow + c * 8) = *reinterpret_cast<const uint2*>(b);
  }
}

// Index 0..7 of the E2M1 magnitude nearest to a = |v| (values 0, .5, 1, 1.5, 2, 3, 4, 6; ties to
// the even mantissa bit, saturating), as the CPU's FloatToE2M1 thresholds give it; NaN -> 7.
__device__ __forceinline__ uint32_t E2M1Index(float a) {
  if (a <= 0.25f) return 0;
  if (a < 0.75f) return 1;
  if (a <= 1.25f) return 2;
  if (a < 1.75f) return 3;
  if (a <= 2.5f) return 4;
  if (a < 3.5f) return 5;
  if (a <= 5.0f) return 6;
  return 7;
}

// The E2M1 value nearest to v; the sign follows v.
__device__ __forceinline__ float E2M1Round(float v) {
  const uint32_t i = E2M1Index(fabsf(v));
  const float r =
      i < 4 ? 0.5f * static_cast<float>(i) : (i == 7 ? 6.0f : static_cast<float>(i - 2));
  return copysignf(r, v);
}

// One NVFP4 block of 16 values: quantize-dequantize under global scale g; writes E2M1 * s_b.
template <bool kVec>
__device__ __forceinline__ void Nvfp4Block(const __nv_bfloat16* in, float g, __nv_bfloat16* out) {
  float f[16];
  Load8<kVec>(in, f);
  Load8<kVec>(in + 8, f + 8);
  float bamax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) bamax = fmaxf(bamax, FiniteAbs(f[i]));
  float sb = FromE4M3(ToE4M3(__fmul_rn(g, __fdiv_rn(bamax, 6.0f))));
  if (sb == 0.0f) sb = 0.125f;  // compressed-tensors' guard (0.125 is an E4M3 value)
  const float step = __fdiv_rn(sb, g);
  __align__(16) __nv_bfloat16 o[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    // E2M1 (<= 2 significant bits) times an E4M3 scale (<= 4) is exact in bf16 (8 bits).
    o[i] = __float2bfloat16_rn(isnan(f[i]) ? f[i] : E2M1Round(__fdiv_rn(f[i], step)) * sb);
  }
  if constexpr (kVec) {
    reinterpret_cast<uint4*>(out)[0] = reinterpret_cast<const uint4*>(o)[0];
    reinterpret_cast<uint4*>(out)[1] = reinterpret_cast<const uint4*>(o)[1];
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) out[i] = o[i];
  }
}

// The row's NVFP4 global scale G_a: `static_g` when > 0, else from the row's finite amax as the
// CPU does. Every thread of the CTA gets it.
template <bool kVec>
__device__ float Nvfp4RowGlobal(const __nv_bfloat16* row, int64_t blocks, float static_g,
                                float* smem) {
  if (static_g > 0.0f) return static_g;
  float amax = 0.0f;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    float f[16];
    Load8<kVec>(row + b * 16, f);
    Load8<kVec>(row + b * 16 + 8, f + 8);
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, FiniteAbs(f[i]));
  }
  amax = BlockMax(amax, smem);
  // torch's 2688 / amax: reciprocal, then product (two roundings), as the CPU does.
  const float g = __fmul_rn(__fdiv_rn(1.0f, fmaxf(amax, FLT_MIN)), 2688.0f);
  return isfinite(g) ? g : 1.0f;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    QuantDequantNvfp4Kernel(const __nv_bfloat16* x, int64_t n, float static_g, __nv_bfloat16* xq,
                            float* inv_global) {
  __shared__ float smem[32];
  const __nv_bfloat16* row = x + blockIdx.x * n;
  __nv_bfloat16* orow = xq + blockIdx.x * n;
  const int64_t blocks = n / 16;
  const float g = Nvfp4RowGlobal<kVec>(row, blocks, static_g, smem);
  if (threadIdx.x == 0) inv_global[blockIdx.x] = __fdiv_rn(1.0f, g);
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    Nvfp4Block<kVec>(row + b * 16, g, orow + b * 16);
  }
}

// The CPU's FloatToE2M1: the nibble of the E2M1 value nearest to v (ties to even, saturating),
// sign bit from v's (so -0 and small negatives give 8), NaN -> 0.
__device__ __forceinline__ uint32_t E2M1Code(float v) {
  if (isnan(v)) return 0u;
  return E2M1Index(fabsf(v)) | (signbit(v) ? 8u : 0u);
}

// One NVFP4 block of 16 values under global scale g, in stored form: 8 bytes of nibbles
// (element 2j low) and the UE4M3 scale code, as PackNvfp4ActivationRow computes them.
template <bool kVec>
__device__ __forceinline__ uint8_t Nvfp4PackBlock(const __nv_bfloat16* in, float g, uint2* out) {
  float f[16];
  Load8<kVec>(in, f);
  Load8<kVec>(in + 8, f + 8);
  float bamax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) bamax = fmaxf(bamax, FiniteAbs(f[i]));
  uint8_t code = ToE4M3(__fmul_rn(g, __fdiv_rn(bamax, 6.0f)));
  if (FromE4M3(code) == 0.0f) code = ToE4M3(0.125f);  // compressed-tensors' guard
  const float step = __fdiv_rn(FromE4M3(code), g);
  uint2 p = make_uint2(0u, 0u);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    p.x |= E2M1Code(__fdiv_rn(f[i], step)) << (4 * i);
    p.y |= E2M1Code(__fdiv_rn(f[8 + i], step)) << (4 * i);
  }
  *out = p;
  return code;
}

// One CTA per row of the padded scale tensor: rows < m quantize; the others (up to the next
// multiple of 128) only zero their scale padding, as do real rows past their last block.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    QuantizeNvfp4PackedKernel(const __nv_bfloat16* x, int64_t m, int64_t n, float static_g,
                              uint2* packed, uint8_t* tiled_scales, float* inv_global) {
  __shared__ float smem[32];
  const int64_t r = blockIdx.x;
  const int64_t blocks = n / 16;
  const int64_t padded_cols = TiledScaleCols(blocks);
  if (r >= m) {
    for (int64_t b = threadIdx.x; b < padded_cols; b += blockDim.x) {
      tiled_scales[TiledScaleOffset(r, b, blocks)] = 0;
    }
    return;
  }
  const __nv_bfloat16* row = x + r * n;
  const float g = Nvfp4RowGlobal<kVec>(row, blocks, static_g, smem);
  if (threadIdx.x == 0) inv_global[r] = __fdiv_rn(1.0f, g);
  for (int64_t b = threadIdx.x; b < padded_cols; b += blockDim.x) {
    uint8_t code = 0;
    if (b < blocks) code = Nvfp4PackBlock<kVec>(row + b * 16, g, packed + r * blocks + b);
    tiled_scales[TiledScaleOffset(r, b, blocks)] = code;
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void CheckRows(int64_t m, const char* what) {
  if (m < 1 || m > 0x7fffffff) {
    std::fprintf(stderr, "%s: bad row count %lld\n", what, static_cast<long long>(m));
    std::abort();
  }
}

}  // namespace

void QuantizeFp8PerToken(const __nv_bfloat16* x, int64_t m, int64_t n, __nv_fp8_e4m3* q,
                         float* scale, cudaStream_t stream) {
  CheckRows(m, "QuantizeFp8PerToken");
  const bool vec = n % 8 == 0 && Aligned16(x) && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  if (vec) {
    QuantizeFp8Kernel<true><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, n, q, scale);
  } else {
    QuantizeFp8Kernel<false><<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, n, q, scale);
  }
  CUDA_CHECK_LAUNCH();
}

void SwiGluQuantizeFp8PerToken(const SwiGluFp8Args& args, cudaStream_t stream) {
  SwiGluFp8Args a = args;
  if (a.in_stride == 0) a.in_stride = a.n;
  CheckRows(a.m, "SwiGluQuantizeFp8PerToken");
  if (a.n % 8 != 0 || a.in_stride % 8 != 0 || !Aligned16(a.gate) || !Aligned16(a.up) ||
      !Aligned16(a.q)) {
    std::fprintf(stderr, "SwiGluQuantizeFp8PerToken: needs n %% 8 == 0 and aligned rows\n");
    std::abort();
  }
  const size_t smem = static_cast<size_t>(a.n) * 2;
  // Not a stream operation, so it is allowed during graph capture.
  CUDA_CHECK(cudaFuncSetAttribute(SwiGluQuantizeFp8Kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(smem)));
  SwiGluQuantizeFp8Kernel<<<static_cast<unsigned>(a.m), kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void QuantDequantNvfp4(const __nv_bfloat16* x, int64_t m, int64_t n, float act_global_scale,
                       __nv_bfloat16* xq, float* inv_global, cudaStream_t stream) {
  CheckRows(m, "QuantDequantNvfp4");
  if (n % 16 != 0) {
    std::fprintf(stderr, "QuantDequantNvfp4: row length %lld is not a multiple of 16\n",
                 static_cast<long long>(n));
    std::abort();
  }
  const unsigned grid = static_cast<unsigned>(m);
  if (Aligned16(x) && Aligned16(xq)) {
    QuantDequantNvfp4Kernel<true>
        <<<grid, kThreads, 0, stream>>>(x, n, act_global_scale, xq, inv_global);
  } else {
    QuantDequantNvfp4Kernel<false>
        <<<grid, kThreads, 0, stream>>>(x, n, act_global_scale, xq, inv_global);
  }
  CUDA_CHECK_LAUNCH();
}

void QuantizeNvfp4Packed(const Nvfp4PackedActivations& a, cudaStream_t stream) {
  CheckRows(a.m, "QuantizeNvfp4Packed");
  if (a.n % 16 != 0 || reinterpret_cast<uintptr_t>(a.packed) % 8 != 0) {
    std::fprintf(stderr,
                 "QuantizeNvfp4Packed: row length %lld is not a multiple of 16 or the packed "
                 "output is not 8-byte aligned\n",
                 static_cast<long long>(a.n));
    std::abort();
  }
  const unsigned grid = static_cast<unsigned>(TiledScaleRows(a.m));
  auto* packed = reinterpret_cast<uint2*>(a.packed);
  if (Aligned16(a.x)) {
    QuantizeNvfp4PackedKernel<true><<<grid, kThreads, 0, stream>>>(
        a.x, a.m, a.n, a.act_global_scale, packed, a.tiled_scales, a.inv_global);
  } else {
    QuantizeNvfp4PackedKernel<false><<<grid, kThreads, 0, stream>>>(
        a.x, a.m, a.n, a.act_global_scale, packed, a.tiled_scales, a.inv_global);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace dq::cuda
