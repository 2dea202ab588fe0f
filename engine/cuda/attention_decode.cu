#include <cassert>
#include <cmath>

#include "engine/cuda/attention_decode.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernel_util.cuh"

namespace dq::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kUnroll = 8;  // keys per lane group loaded (raw, 16 bytes each) before use

int MaxSplits(int max_context) { return (max_context + kDecodePartition - 1) / kDecodePartition; }

struct Workspace {  // partial (unnormalised) outputs and softmax states per split
  float* out;       // [seqs, heads, splits, head_dim]
  float* max;       // [seqs, heads, splits]
  float* sum;       // [seqs, heads, splits]
};

Workspace Carve(void* base, int seqs, int heads, int head_dim, int splits) {
  float* f = static_cast<float*>(base);
  const int64_t states = int64_t{seqs} * heads * splits;
  return {f, f + states * head_dim, f + states * head_dim + states};
}

__device__ __forceinline__ void Unpack8(const detail::Bf16x8& v, float (&x)[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(v.h[i]);
    x[2 * i] = f.x, x[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Load8(const __nv_bfloat16* p, float (&x)[8]) {
  Unpack8(*reinterpret_cast<const detail::Bf16x8*>(p), x);
}
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

// Block (split, kv_head, seq). A lane group of kHeadDim / 8 lanes owns one key at a time, each
// lane 8 dims (one 16-byte load); a warp covers 32 / (kHeadDim / 8) keys per step.
template <int kHeadDim, int kMaxGroup>
__global__ void __launch_bounds__(kThreads)
    DecodeSplitKernel(DecodeAttentionArgs a, KvCacheLayer c, Workspace ws, int splits) {
  constexpr int kLanes = kHeadDim / 8, kKeysPerWarp = 32 / kLanes;
  constexpr int kRed = kWarps * kMaxGroup * kHeadDim, kScores = kMaxGroup * kDecodePartition;
  __shared__ float smem[kRed > kScores ? kRed : kScores];
  __shared__ float head_max[kMaxGroup], head_sum[kMaxGroup];
  const int seq = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
  const int ctx = a.context_lens[seq];
  const int start = split * kDecodePartition;
  if (start >= ctx) return;
  const int n = min(ctx - start, kDecodePartition);
  const int group = a.num_heads / c.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int li = lane % kLanes, sub = lane / kLanes;
  const int32_t* table = a.block_tables + int64_t{seq} * a.max_blocks_per_seq;
  float q[kMaxGroup][8];
#pragma unroll
  for (int j = 0; j < kMaxGroup; ++j) {
    if (j < group) Load8(a.q + seq * a.q_stride + (kvh * group + j) * kHeadDim + li * 8, q[j]);
  }
  auto key_ptr = [&](const __nv_bfloat16* base, int kk) {
    const int pos = start + kk;
    return base +
           (int64_t{table[pos / c.block_size]} * c.block_size + pos % c.block_size) *
               c.token_stride() +
           kvh * kHeadDim + li * 8;
  };
  float* scores = smem;  // [kMaxGroup][kDecodePartition]
  constexpr int kStep = kWarps * kKeysPerWarp;
  for (int base = warp * kKeysPerWarp; base < n; base += kStep * kUnroll) {  // warp-uniform
    const int k0 = base + sub;
    detail::Bf16x8 raw[kUnroll];  // all loads in flight before the first use
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + u * kStep < n) {
        raw[u] = *reinterpret_cast<const detail::Bf16x8*>(key_ptr(c.k, k0 + u * kStep));
        PrefetchL2(key_ptr(c.v, k0 + u * kStep));  // V is read after the softmax: warm L2
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kv[8];
      Unpack8(raw[u], kv);
#pragma unroll
      for (int j = 0; j < kMaxGroup; ++j) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d += q[j][i] * kv[i];
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        if (li == 0 && j < group && k0 + u * kStep < n) {
          scores[j * kDecodePartition + k0 + u * kStep] = d * a.scale;
        }
      }
    }
  }
  __syncthreads();
  for (int j = warp; j < group; j += kWarps) {  // softmax state per head: warp j
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, scores[j * kDecodePartition + i]);
    m = detail::WarpMax(m);
    float l = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float p = expf(scores[j * kDecodePartition + i] - m);
      scores[j * kDecodePartition + i] = p;
      l += p;
    }
    l = detail::WarpSum(l);
    if (lane == 0) head_max[j] = m, head_sum[j] = l;
  }
  __syncthreads();
  float acc[kMaxGroup][8] = {};
  for (int base = warp * kKeysPerWarp; base < n; base += kStep * kUnroll) {  // warp-uniform
    const int k0 = base + sub;
    detail::Bf16x8 raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + u * kStep < n)
        raw[u] = *reinterpret_cast<const detail::Bf16x8*>(key_ptr(c.v, k0 + u * kStep));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + u * kStep >= n) continue;
      float vv[8];
      Unpack8(raw[u], vv);
#pragma unroll
      for (int j = 0; j < kMaxGroup; ++j) {
        const float p = j < group ? scores[j * kDecodePartition + k0 + u * kStep] : 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[j][i] += p * vv[i];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxGroup; ++j) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int o = 16; o >= kLanes; o >>= 1)
        acc[j][i] += __shfl_xor_sync(0xffffffffu, acc[j][i], o);
    }
  }
  __syncthreads();  // scores are dead: reuse smem for the per-warp partial outputs
  if (sub == 0) {
#pragma unroll
    for (int j = 0; j < kMaxGroup; ++j) {
#pragma unroll
      for (int i = 0; i < 8; ++i) smem[(warp * kMaxGroup + j) * kHeadDim + li * 8 + i] = acc[j][i];
    }
  }
  __syncthreads();
  const int num_splits = (ctx + kDecodePartition - 1) / kDecodePartition;
  for (int idx = threadIdx.x; idx < group * kHeadDim; idx += kThreads) {
    const int j = idx / kHeadDim, d = idx % kHeadDim;
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += smem[(w * kMaxGroup + j) * kHeadDim + d];
    const int h = kvh * group + j;
    if (num_splits == 1) {
      a.out[(int64_t{seq} * a.num_heads + h) * kHeadDim + d] = __float2bfloat16(o / head_sum[j]);
    } else {
      const int64_t state = (int64_t{seq} * a.num_heads + h) * splits + split;
      ws.out[state * kHeadDim + d] = o;
      if (d == 0) ws.max[state] = head_max[j], ws.sum[state] = head_sum[j];
    }
  }
}

// Block (head, seq), one thread per output dim: merges the splits' softmax states.
__global__ void DecodeReduceKernel(DecodeAttentionArgs a, Workspace ws, int splits, int head_dim) {
  const int seq = blockIdx.y, h = blockIdx.x, d = threadIdx.x;
  const int num_splits = (a.context_lens[seq] + kDecodePartition - 1) / kDecodePartition;
  if (num_splits <= 1) return;  // written by the split kernel
  const int64_t state0 = (int64_t{seq} * a.num_heads + h) * splits;
  float m = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, ws.max[state0 + s]);
  float l = 0.0f, o = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float w = expf(ws.max[state0 + s] - m);
    l += ws.sum[state0 + s] * w;
    o += ws.out[(state0 + s) * head_dim + d] * w;
  }
  a.out[(int64_t{seq} * a.num_heads + h) * head_dim + d] = __float2bfloat16(o / l);
}

template <int kHeadDim, int kMaxGroup>
void Launch(const DecodeAttentionArgs& a, const KvCacheLayer& c, cudaStream_t stream) {
  const int splits = MaxSplits(a.max_context);
  const Workspace ws = Carve(a.workspace, a.num_seqs, a.num_heads, kHeadDim, splits);
  const dim3 grid(splits, c.num_kv_heads, a.num_seqs);
  DecodeSplitKernel<kHeadDim, kMaxGroup><<<grid, kThreads, 0, stream>>>(a, c, ws, splits);
  CUDA_CHECK_LAUNCH();
  DecodeReduceKernel<<<dim3(a.num_heads, a.num_seqs), kHeadDim, 0, stream>>>(a, ws, splits,
                                                                             kHeadDim);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t DecodeAttentionWorkspaceBytes(int num_seqs, int num_heads, int head_dim, int max_context) {
  const size_t states = size_t(num_seqs) * num_heads * MaxSplits(max_context);
  return states * (head_dim + 2) * sizeof(float);
}

void DecodeAttentionForward(const DecodeAttentionArgs& args, const KvCacheLayer& cache,
                            cudaStream_t stream) {
  DecodeAttentionArgs a = args;
  if (a.q_stride == 0) a.q_stride = int64_t{a.num_heads} * cache.head_dim;
  if (a.scale == 0.0f) a.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  const int group = a.num_heads / cache.num_kv_heads;
  assert(a.q && a.out && a.block_tables && a.context_lens && a.max_context > 0);
  assert(group * cache.num_kv_heads == a.num_heads && group >= 1 && group <= 8);
  assert(a.workspace_bytes >=
         DecodeAttentionWorkspaceBytes(a.num_seqs, a.num_heads, cache.head_dim, a.max_context));
  assert(a.q_stride % 8 == 0);
  if (a.num_seqs == 0) return;
  // The one place head_dim and the GQA group become template parameters.
  const bool small = group <= 4;
  if (cache.head_dim == 128) {
    return small ? Launch<128, 4>(a, cache, stream) : Launch<128, 8>(a, cache, stream);
  }
  if (cache.head_dim == 64) {
    return small ? Launch<64, 4>(a, cache, stream) : Launch<64, 8>(a, cache, stream);
  }
  assert(false && "DecodeAttentionForward: head_dim must be 64 or 128");
}

}  // namespace dq::cuda
