#include <cassert>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"
#include "engine/cuda/rope.h"

namespace dq::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// One warp per (token, head): heads [0, nh) are queries, [nh, nh + nkv) keys, and, when the
// cache is written, [nh + nkv, nh + 2 nkv) values (copied only). Lane l owns the rotation
// pairs i = l + 32 j (j < kPairs); pair i is (i, i + d/2) or (2i, 2i + 1).
template <int kHeadDim, bool kInterleaved>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    QkNormRopeKernel(QkNormRopeArgs a, KvCacheLayer cache) {
  constexpr int kHalf = kHeadDim / 2, kPairs = kHalf / 32;
  const int lane = threadIdx.x & 31;
  const bool write_cache = a.slot_mapping != nullptr;
  const int heads = a.num_heads + a.num_kv_heads * (write_cache ? 2 : 1);
  const int64_t w = blockIdx.x * int64_t{kWarpsPerBlock} + (threadIdx.x >> 5);
  // Everything up to the first read of q / k / v depends only on the step's metadata (copied in
  // before the step's first kernel) and the weights, so it runs before griddepcontrol.wait,
  // overlapping the previous kernel's tail: positions, slots, norm weights and the rotations.
  const bool live = w < a.tokens * heads;
  const int64_t t = live ? w / heads : 0;
  const int h = live ? static_cast<int>(w % heads) : 0;
  const int32_t slot = write_cache && live ? a.slot_mapping[t] : -1;
  const bool is_v = h >= a.num_heads + a.num_kv_heads;
  const bool is_q = h < a.num_heads;
  const float* nw = is_q ? a.q_norm_weight : a.k_norm_weight;
  float sn[kPairs], cs[kPairs], wa[kPairs], wb[kPairs];
  if (live && !is_v) {
    const float pos = static_cast<float>(a.positions[t]);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const int i = lane + 32 * j;
      const int ia = kInterleaved ? 2 * i : i, ib = kInterleaved ? 2 * i + 1 : i + kHalf;
      sincosf(pos * a.inv_freq[i], &sn[j], &cs[j]);
      wa[j] = nw != nullptr ? nw[ia] : 1.0f;
      wb[j] = nw != nullptr ? nw[ib] : 1.0f;
    }
  }
  detail::PdlWait();
  detail::PdlTrigger();
  if (!live) return;
  if (is_v) {  // V: copy into the cache
    if (slot < 0) return;
    const int kvh = h - a.num_heads - a.num_kv_heads;
    const __nv_bfloat16* src = a.v + t * a.v_stride + kvh * kHeadDim;
    __nv_bfloat16* dst = cache.v + slot * cache.token_stride() + kvh * kHeadDim;
    for (int i = lane; i < kHeadDim / 2; i += 32) {
      reinterpret_cast<__nv_bfloat162*>(dst)[i] = reinterpret_cast<const __nv_bfloat162*>(src)[i];
    }
    return;
  }
  const int hh = is_q ? h : h - a.num_heads;
  __nv_bfloat16* x =
      is_q ? a.q + t * a.q_stride + hh * kHeadDim : a.k + t * a.k_stride + hh * kHeadDim;
  float x1[kPairs], x2[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int i = lane + 32 * j;
    const int ia = kInterleaved ? 2 * i : i, ib = kInterleaved ? 2 * i + 1 : i + kHalf;
    x1[j] = __bfloat162float(x[ia]);
    x2[j] = __bfloat162float(x[ib]);
  }
  if (nw != nullptr) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) ss += x1[j] * x1[j] + x2[j] * x2[j];
    ss = detail::WarpSum(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(kHeadDim) + a.eps);
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      x1[j] = wa[j] * (x1[j] * inv);
      x2[j] = wb[j] * (x2[j] * inv);
    }
  }
  __nv_bfloat16* dst =
      (!is_q && slot >= 0) ? cache.k + slot * cache.token_stride() + hh * kHeadDim : nullptr;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int i = lane + 32 * j;
    const int ia = kInterleaved ? 2 * i : i, ib = kInterleaved ? 2 * i + 1 : i + kHalf;
    const float s = sn[j], c = cs[j];
    const __nv_bfloat16 ya = __float2bfloat16(x1[j] * c - x2[j] * s);
    const __nv_bfloat16 yb = __float2bfloat16(x2[j] * c + x1[j] * s);
    x[ia] = ya;
    x[ib] = yb;
    if (dst != nullptr) dst[ia] = ya, dst[ib] = yb;
  }
}

template <int kHeadDim>
void Launch(const QkNormRopeArgs& a, const KvCacheLayer& cache, cudaStream_t stream) {
  const int heads = a.num_heads + a.num_kv_heads * (a.slot_mapping != nullptr ? 2 : 1);
  const int64_t warps = a.tokens * heads;
  const dim3 grid(static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock));
  if (a.style == RopeStyle::kInterleaved) {
    detail::LaunchPdl(QkNormRopeKernel<kHeadDim, true>, grid, kWarpsPerBlock * 32, 0, stream, a,
                      cache);
  } else {
    detail::LaunchPdl(QkNormRopeKernel<kHeadDim, false>, grid, kWarpsPerBlock * 32, 0, stream, a,
                      cache);
  }
}

}  // namespace

void QkNormRopeForward(const QkNormRopeArgs& args, const KvCacheLayer& cache, cudaStream_t stream) {
  QkNormRopeArgs a = args;
  if (a.q_stride == 0) a.q_stride = int64_t{a.num_heads} * a.head_dim;
  if (a.k_stride == 0) a.k_stride = int64_t{a.num_kv_heads} * a.head_dim;
  if (a.v_stride == 0) a.v_stride = int64_t{a.num_kv_heads} * a.head_dim;
  assert(a.q != nullptr && a.k != nullptr && a.positions != nullptr && a.inv_freq != nullptr);
  assert(a.slot_mapping == nullptr ||
         (a.v != nullptr && cache.k != nullptr && cache.num_kv_heads == a.num_kv_heads &&
          cache.head_dim == a.head_dim));
  if (a.tokens == 0) return;
  switch (a.head_dim) {  // the one place head_dim becomes a template parameter
    case 64:
      return Launch<64>(a, cache, stream);
    case 128:
      return Launch<128>(a, cache, stream);
    case 256:
      return Launch<256>(a, cache, stream);
    default:
      assert(false && "QkNormRopeForward: head_dim must be 64, 128 or 256");
  }
}

}  // namespace dq::cuda
