#include <cassert>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/norm.h"

namespace dq::cuda {
namespace {

constexpr int kThreads = 256;

enum class Delta { kNone, kF32, kBf16 };

template <Delta D>
__device__ __forceinline__ float4 LoadResidual(const RmsNormArgs& a, int64_t i4) {
  float4 r = reinterpret_cast<const float4*>(a.residual_in)[i4];
  if constexpr (D == Delta::kF32) {
    const float4 d = reinterpret_cast<const float4*>(a.delta_f32)[i4];
    r.x += d.x, r.y += d.y, r.z += d.z, r.w += d.w;
  } else if constexpr (D == Delta::kBf16) {
    const __nv_bfloat162* d = reinterpret_cast<const __nv_bfloat162*>(a.delta_bf16) + 2 * i4;
    const float2 lo = __bfloat1622float2(d[0]), hi = __bfloat1622float2(d[1]);
    r.x += lo.x, r.y += lo.y, r.z += hi.x, r.w += hi.y;
  }
  return r;
}

// One block per row. Pass 1 forms r (writing residual_out) and its sum of squares; pass 2
// re-reads r (from residual_out, else recomputes it; the row is in L1/L2) and normalises.
template <Delta D>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  detail::PdlWait();
  detail::PdlTrigger();
  const int n4 = a.n / 4;
  const int64_t base = blockIdx.x * int64_t{n4};
  float ss = 0.0f;
  for (int i = threadIdx.x; i < n4; i += kThreads) {
    const float4 r = LoadResidual<D>(a, base + i);
    if (a.residual_out != nullptr) reinterpret_cast<float4*>(a.residual_out)[base + i] = r;
    ss += r.x * r.x + r.y * r.y + r.z * r.z + r.w * r.w;
  }
  ss = detail::BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.n) + a.eps);
  for (int i = threadIdx.x; i < n4; i += kThreads) {
    // residual_out was written by this same thread in pass 1, so no barrier is needed.
    const float4 r = a.residual_out != nullptr
                         ? reinterpret_cast<const float4*>(a.residual_out)[base + i]
                         : LoadResidual<D>(a, base + i);
    const float4 w = reinterpret_cast<const float4*>(a.weight)[i];
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(a.out) + 2 * (base + i);
    o[0] = __floats2bfloat162_rn(w.x * (r.x * inv), w.y * (r.y * inv));
    o[1] = __floats2bfloat162_rn(w.z * (r.z * inv), w.w * (r.w * inv));
  }
}

// The same computation for rows of at most kPer * kThreads * 4 values, each thread's part held in
// registers: the weights are loaded before griddepcontrol.wait (they are not the previous
// kernel's output) and the row is read once, so after the wait the kernel is one global read,
// one block reduction and one write. Same element order and sums as RmsNormKernel.
template <Delta D, int kPer>
__global__ void __launch_bounds__(kThreads) RmsNormRegKernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  const int n4 = a.n / 4;
  float4 w[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < n4) w[k] = reinterpret_cast<const float4*>(a.weight)[i];
  }
  detail::PdlWait();
  detail::PdlTrigger();
  const int64_t base = blockIdx.x * int64_t{n4};
  float4 r[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i >= n4) break;
    r[k] = LoadResidual<D>(a, base + i);
    if (a.residual_out != nullptr) reinterpret_cast<float4*>(a.residual_out)[base + i] = r[k];
    ss += r[k].x * r[k].x + r[k].y * r[k].y + r[k].z * r[k].z + r[k].w * r[k].w;
  }
  ss = detail::BlockSum(ss, scratch);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.n) + a.eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i >= n4) break;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(a.out) + 2 * (base + i);
    o[0] = __floats2bfloat162_rn(w[k].x * (r[k].x * inv), w[k].y * (r[k].y * inv));
    o[1] = __floats2bfloat162_rn(w[k].z * (r[k].z * inv), w[k].w * (r[k].w * inv));
  }
}

// The one place the delta kind and the row length become template parameters.
template <Delta D>
void LaunchRmsNorm(const RmsNormArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.rows));
  const int per = (a.n / 4 + kThreads - 1) / kThreads;
  switch (per) {
    case 1:
      return detail::LaunchPdl(RmsNormRegKernel<D, 1>, grid, kThreads, 0, stream, a);
    case 2:
      return detail::LaunchPdl(RmsNormRegKernel<D, 2>, grid, kThreads, 0, stream, a);
    case 3:
      return detail::LaunchPdl(RmsNormRegKernel<D, 3>, grid, kThreads, 0, stream, a);
    case 4:
      return detail::LaunchPdl(RmsNormRegKernel<D, 4>, grid, kThreads, 0, stream, a);
    default:
      return detail::LaunchPdl(RmsNormKernel<D>, grid, kThreads, 0, stream, a);
  }
}

}  // namespace

void RmsNormForward(const RmsNormArgs& a, cudaStream_t stream) {
  assert(a.n % 4 == 0 && a.residual_in != nullptr && a.weight != nullptr && a.out != nullptr);
  assert(a.delta_f32 == nullptr || a.delta_bf16 == nullptr);
  if (a.rows == 0) return;
  if (a.delta_f32 != nullptr) {
    LaunchRmsNorm<Delta::kF32>(a, stream);
  } else if (a.delta_bf16 != nullptr) {
    LaunchRmsNorm<Delta::kBf16>(a, stream);
  } else {
    LaunchRmsNorm<Delta::kNone>(a, stream);
  }
}

}  // namespace dq::cuda
