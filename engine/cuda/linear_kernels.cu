#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/linear_kernels.h"
#include "engine/quant/nvfp4_scale_layout.h"

namespace dq::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float FromE4M3(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(code, __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float E2M1Value(uint32_t nibble) {
  constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kValues[nibble & 7u];
  return (nibble & 8u) ? -mag : mag;
}

// One thread per block of 16 weights: 8 packed bytes + 1 scale in, 32 bytes of bf16 out.
// kTiled: the scales are in cuBLASLt's tiled layout for `row_blocks` scales per row.
template <bool kTiled>
__global__ void __launch_bounds__(kThreads)
    UnpackNvfp4Kernel(const uint2* packed, const uint8_t* scales, int64_t blocks,
                      int64_t row_blocks, uint4* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < blocks;
       b += stride) {
    const uint2 p = packed[b];
    const int64_t at = kTiled ? TiledScaleOffset(b / row_blocks, b % row_blocks, row_blocks) : b;
    const float s = FromE4M3(scales[at]);
    __align__(16) __nv_bfloat16 o[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t byte = ((i < 4 ? p.x : p.y) >> (8 * (i % 4))) & 0xFFu;
      o[2 * i] = __float2bfloat16_rn(E2M1Value(byte & 0xFu) * s);
      o[2 * i + 1] = __float2bfloat16_rn(E2M1Value(byte >> 4) * s);
    }
    out[2 * b] = reinterpret_cast<const uint4*>(o)[0];
    out[2 * b + 1] = reinterpret_cast<const uint4*>(o)[1];
  }
}

template <int kVec>
__global__ void __launch_bounds__(kThreads) ScaleEpilogueKernel(ScaleEpilogueArgs a) {
  const int64_t total = a.rows * a.cols / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < total;
       v += stride) {
    const int64_t e = v * kVec;
    const int64_t i = e / a.cols, j = e % a.cols;
    const float rs = (a.row_scale != nullptr ? a.row_scale[i] : 1.0f) * a.alpha;
    float acc[kVec];
    if constexpr (kVec == 4) {
      const float4 t = reinterpret_cast<const float4*>(a.acc)[v];
      acc[0] = t.x, acc[1] = t.y, acc[2] = t.z, acc[3] = t.w;
    } else {
      acc[0] = a.acc[e];
    }
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const float cs = a.col_scale != nullptr ? a.col_scale[j + u] : 1.0f;
      const float val = acc[u] * (cs * rs);
      if (a.y_accumulate != nullptr) {
        a.y_accumulate[e + u] += val;
      } else {
        a.y_bf16[e + u] = __float2bfloat16_rn(val);
      }
    }
  }
}

unsigned GridFor(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 132 * 16));
}

}  // namespace

namespace {

void UnpackNvfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 bool tiled, __nv_bfloat16* out, cudaStream_t stream) {
  if (cols % 16 != 0 || reinterpret_cast<uintptr_t>(packed) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    std::fprintf(stderr, "UnpackNvfp4ToBf16: cols %lld not a multiple of 16, or misaligned\n",
                 static_cast<long long>(cols));
    std::abort();
  }
  const int64_t blocks = rows * cols / 16;
  const auto* p = reinterpret_cast<const uint2*>(packed);
  auto* o = reinterpret_cast<uint4*>(out);
  if (tiled) {
    UnpackNvfp4Kernel<true>
        <<<GridFor(blocks), kThreads, 0, stream>>>(p, scales, blocks, cols / 16, o);
  } else {
    UnpackNvfp4Kernel<false>
        <<<GridFor(blocks), kThreads, 0, stream>>>(p, scales, blocks, cols / 16, o);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void UnpackNvfp4ToBf16(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                       __nv_bfloat16* out, cudaStream_t stream) {
  UnpackNvfp4(packed, scales, rows, cols, false, out, stream);
}

void UnpackNvfp4TiledToBf16(const uint8_t* packed, const uint8_t* tiled_scales, int64_t rows,
                            int64_t cols, __nv_bfloat16* out, cudaStream_t stream) {
  UnpackNvfp4(packed, tiled_scales, rows, cols, true, out, stream);
}

void ScaleEpilogue(const ScaleEpilogueArgs& args, cudaStream_t stream) {
  if ((args.y_bf16 == nullptr) == (args.y_accumulate == nullptr) || args.acc == nullptr) {
    std::fprintf(stderr, "ScaleEpilogue: needs an input and exactly one output\n");
    std::abort();
  }
  const int64_t total = args.rows * args.cols;
  if (args.cols % 4 == 0 && reinterpret_cast<uintptr_t>(args.acc) % 16 == 0) {
    ScaleEpilogueKernel<4><<<GridFor(total / 4), kThreads, 0, stream>>>(args);
  } else {
    ScaleEpilogueKernel<1><<<GridFor(total), kThreads, 0, stream>>>(args);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace dq::cuda
