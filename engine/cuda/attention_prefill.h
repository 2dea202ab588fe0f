// Causal prefill attention over a variable-length batch, flash-attention style: per block, a
// tile of 128 query rows of one head streams tiles of K and V from the paged cache (bf16 tensor
// cores, fp32 accumulators, online softmax in fp32): two Hopper wgmma warpgroups of 64 rows
// taking turns over key tiles of 64 (the default, "wg64pp") or 128 keys ("wg128pp"), chosen by
// PrefillAttentionArgs::variant (KernelOptions::prefill_attention; H200 timings in
// bench/results/gpu_attention_timing_h200.json). Deleted after losing to wg64pp at every measured
// length (issue 18): the mma.sync kernel (8K: 3.24 vs 1.53 ms), the warp-specialized ws64 / ws64pp
// / ws128 / ws128pp (8K: 2.03 to 2.33 ms; bench/results/gpu_tests_4d1b75d_h200.log) and wgmma
// without ping-pong (wg64: 0.158 vs 0.148 ms at 2K, wg128: 1.62 vs 1.51 ms at 8K;
// gpu_attention_timing_h200.json as of 32d65df).
// Sequence s has new tokens [cu_seqlens[s], cu_seqlens[s+1]) at positions prefix_lens[s] + i, and
// their K/V are already in the cache (QkNormRopeForward writes them), so chunked prefill attends to
// the cached prefix through the same block table: query position p attends to [0, p]. GQA: query
// head h reads KV head h / (num_heads / num_kv_heads). Output bf16 [tokens, num_heads, hd].
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernel_options.h"
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
  // Which kernel runs (KernelOptions::prefill_attention); the FP8 kernel ignores it.
  PrefillAttentionKernel variant = PrefillAttentionKernel::kWgmma64;
};

// Preconditions (asserted): head_dim in {64, 128}; num_heads a multiple of num_kv_heads;
// 16-byte aligned q rows.
void PrefillAttentionForward(const PrefillAttentionArgs& args, const KvCacheLayer& cache,
                             cudaStream_t stream);

}  // namespace dq::cuda
