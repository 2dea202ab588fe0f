// Qwen3's per-head QK-norm fused with rotary position embedding, and the write of this step's
// K and V into the paged bf16 KV cache, in one launch. Per token t (position positions[t]):
//   q[t, h] = rope(rmsnorm(q[t, h]) * q_norm_weight)  for every query head (in place)
//   k[t, h] = rope(rmsnorm(k[t, h]) * k_norm_weight)  for every KV head (in place)
//   cache.k[slot_mapping[t]] = k[t]; cache.v[slot_mapping[t]] = v[t]   (if slot_mapping given)
// Without norm weights the norm is skipped (Llama). RoPE pairs (i, i + d/2) for kNeox and
// (2i, 2i+1) for kInterleaved, angle = position * inv_freq[i] in fp32, as cpu::ApplyRope does.
// q, k and v may be views into one fused QKV output (row strides in elements).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kv_cache.h"
#include "engine/model/model_config.h"

namespace dq::cuda {

struct QkNormRopeArgs {
  __nv_bfloat16* q = nullptr;             // [tokens, q_stride]
  __nv_bfloat16* k = nullptr;             // [tokens, k_stride]
  const __nv_bfloat16* v = nullptr;       // [tokens, v_stride]; needed only for the cache write
  int64_t q_stride = 0;                   // 0: num_heads * head_dim
  int64_t k_stride = 0;                   // 0: num_kv_heads * head_dim
  int64_t v_stride = 0;                   // 0: num_kv_heads * head_dim
  const float* q_norm_weight = nullptr;   // [head_dim] or null (no QK-norm)
  const float* k_norm_weight = nullptr;   // [head_dim] or null
  const int32_t* positions = nullptr;     // [tokens]
  const float* inv_freq = nullptr;        // [head_dim / 2] (cpu::RopeInverseFrequencies)
  const int32_t* slot_mapping = nullptr;  // [tokens] or null (no cache write); < 0: skip token
  int64_t tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
  RopeStyle style = RopeStyle::kNeox;
};

// Preconditions (asserted): head_dim in {64, 128, 256}; cache shape matches when writing.
void QkNormRopeForward(const QkNormRopeArgs& args, const KvCacheLayer& cache, cudaStream_t stream);

}  // namespace dq::cuda
