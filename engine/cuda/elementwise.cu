#include <cassert>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/kernel_util.cuh"

namespace dq::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t work) { return static_cast<unsigned>((work + kThreads - 1) / kThreads); }
bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Embedding: one thread per 8 values (hidden % 8 == 0) or per value.
template <int kVec>
__global__ void EmbeddingKernel(EmbeddingArgs a) {
  detail::PdlWait();
  detail::PdlTrigger();
  const int per_row = a.hidden / kVec;
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= a.tokens * per_row) return;
  const int64_t t = i / per_row;
  const int c = static_cast<int>(i % per_row) * kVec;
  const __nv_bfloat16* src = a.table + int64_t{a.ids[t]} * a.hidden + c;
  float* dst = a.out + t * a.hidden + c;
  if constexpr (kVec == 8) {
    const detail::Bf16x8 v = *reinterpret_cast<const detail::Bf16x8*>(src);
    const float2 f0 = __bfloat1622float2(v.h[0]), f1 = __bfloat1622float2(v.h[1]);
    const float2 f2 = __bfloat1622float2(v.h[2]), f3 = __bfloat1622float2(v.h[3]);
    reinterpret_cast<float4*>(dst)[0] = make_float4(f0.x, f0.y, f1.x, f1.y);
    reinterpret_cast<float4*>(dst)[1] = make_float4(f2.x, f2.y, f3.x, f3.y);
  } else {
    *dst = __bfloat162float(*src);
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

template <int kVec>
__global__ void SwiGluKernel(SwiGluArgs a) {
  detail::PdlWait();
  detail::PdlTrigger();
  const int per_row = a.cols / kVec;
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i >= a.rows * per_row) return;
  const int64_t r = i / per_row;
  const int c = static_cast<int>(i % per_row) * kVec;
  const __nv_bfloat16* g = a.gate + r * a.in_stride + c;
  const __nv_bfloat16* u = a.up + r * a.in_stride + c;
  __nv_bfloat16* o = a.out + r * a.cols + c;
  if constexpr (kVec == 8) {
    const detail::Bf16x8 gv = *reinterpret_cast<const detail::Bf16x8*>(g);
    const detail::Bf16x8 uv = *reinterpret_cast<const detail::Bf16x8*>(u);
    detail::Bf16x8 ov;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 gf = __bfloat1622float2(gv.h[j]), uf = __bfloat1622float2(uv.h[j]);
      ov.h[j] = __floats2bfloat162_rn(Silu(gf.x) * uf.x, Silu(gf.y) * uf.y);
    }
    *reinterpret_cast<detail::Bf16x8*>(o) = ov;
  } else {
    *o = __float2bfloat16(Silu(__bfloat162float(*g)) * __bfloat162float(*u));
  }
}

template <typename T>
__global__ void ResidualAddKernel(float* residual, const T* delta, int64_t n) {
  detail::PdlWait();
  detail::PdlTrigger();
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i < n) residual[i] += detail::ToFloat(delta[i]);
}

}  // namespace

void EmbeddingForward(const EmbeddingArgs& a, cudaStream_t stream) {
  assert(a.table != nullptr && a.ids != nullptr && a.out != nullptr && a.hidden > 0);
  if (a.tokens == 0) return;
  if (a.hidden % 8 == 0 && Aligned16(a.table) && Aligned16(a.out)) {
    detail::LaunchPdl(EmbeddingKernel<8>, Blocks(a.tokens * a.hidden / 8), kThreads, 0, stream, a);
  } else {
    detail::LaunchPdl(EmbeddingKernel<1>, Blocks(a.tokens * a.hidden), kThreads, 0, stream, a);
  }
}

void SwiGluForward(const SwiGluArgs& args, cudaStream_t stream) {
  SwiGluArgs a = args;
  if (a.in_stride == 0) a.in_stride = a.cols;
  assert(a.gate != nullptr && a.up != nullptr && a.out != nullptr && a.cols > 0);
  if (a.rows == 0) return;
  const bool vec = a.cols % 8 == 0 && a.in_stride % 8 == 0 && Aligned16(a.gate) &&
                   Aligned16(a.up) && Aligned16(a.out);
  if (vec) {
    detail::LaunchPdl(SwiGluKernel<8>, Blocks(a.rows * a.cols / 8), kThreads, 0, stream, a);
  } else {
    detail::LaunchPdl(SwiGluKernel<1>, Blocks(a.rows * a.cols), kThreads, 0, stream, a);
  }
}

void ResidualAddForward(const ResidualAddArgs& a, cudaStream_t stream) {
  assert(a.residual != nullptr && ((a.delta_f32 == nullptr) != (a.delta_bf16 == nullptr)));
  if (a.n == 0) return;
  if (a.delta_f32 != nullptr) {
    detail::LaunchPdl(ResidualAddKernel<float>, Blocks(a.n), kThreads, 0, stream, a.residual,
                      a.delta_f32, a.n);
  } else {
    detail::LaunchPdl(ResidualAddKernel<__nv_bfloat16>, Blocks(a.n), kThreads, 0, stream,
                      a.residual, a.delta_bf16, a.n);
  }
}

}  // namespace dq::cuda
