// Causal prefill attention over a variable-length batch, flash-attention style: per block, a
// tile of 128 query rows of one head streams tiles of K and V from the paged cache (bf16 tensor
// cores, fp32 accumulators, online softmax in fp32). On Hopper the default is two wgmma
// warpgroups of 64 rows taking turns over 64-key tiles (attention_prefill.cu, "wg64pp"); the
// warp-specialized kernels of attention_prefill_ws.cu and the mma.sync kernel are selectable with
// DQ_PREFILL_KERNEL for tuning (H200 timings: bench/results/gpu_attention_timing_h200.json).
// Sequence s has new tokens [cu_seqlens[s], cu_seqlens[s+1]) at positions prefix_lens[s] + i, and
// their K/V are already in the cache (QkNormRopeForward writes them), so chunked prefill attends to
// the cached prefix through the same block table: query position p attends to [0, p]. GQA: query
// head h reads KV head h / (num_heads / num_kv_heads). Output bf16 [tokens, num_heads, hd].
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kv_cache.h"

namespace dq::cuda {

struct PrefillAttentionArgs {
  const __nv_bfloat16* q = nullptr;       // [tokens, q_stride], heads [num_heads][head_dim]
  int64_t q_stride = 0;                   // 0: num_heads * head_dim
  __nv_bfloat16* out = nullptr;           // [tokens, num_heads * head_dim]
  const int32_t* cu_seqlens = nullptr;    // [num_seqs + 1], new-token offsets
  const int32_t* prefix_lens = nullptr;   // [num_seqs], tokens cached before this chunk
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int num_heads = 0;
  int max_q_len = 0;   // host bound on new tokens per sequence: sizes the grid
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
};

// Preconditions (asserted): head_dim in {64, 128}; num_heads a multiple of num_kv_heads;
// 16-byte aligned q rows.
void PrefillAttentionForward(const PrefillAttentionArgs& args, const KvCacheLayer& cache,
                             cudaStream_t stream);

}  // namespace dq::cuda
