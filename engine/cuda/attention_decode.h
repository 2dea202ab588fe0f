// Paged decode attention: one query token per sequence (at position context_len - 1, whose K/V
// are already in the cache), attending to cache positions [0, context_len). GQA: one block
// serves all query heads of a KV head, so each K/V byte is read once. The context is split into
// partitions (flash-decoding), a second kernel merging their softmax states. The grid is sized
// from max_context (a host bound: as many partitions as fill the GPU, in units of
// kDecodePartition), so a captured graph replays for any context_lens up to it; each sequence's
// own context is cut into that many partitions on the device (at least 32 keys each). The
// workspace is passed in.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kv_cache.h"

namespace dq::cuda {

inline constexpr int kDecodePartition = 256;

struct DecodeAttentionArgs {
  const __nv_bfloat16* q = nullptr;       // [seqs, q_stride], heads [num_heads][head_dim]
  int64_t q_stride = 0;                   // 0: num_heads * head_dim
  __nv_bfloat16* out = nullptr;           // [seqs, num_heads * head_dim]
  const int32_t* block_tables = nullptr;  // [seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  const int32_t* context_lens = nullptr;  // [seqs], each in [1, max_context]
  int num_seqs = 0;
  int num_heads = 0;
  int max_context = 0;        // host-side bound on context_lens: sizes the grid and workspace
  float scale = 0.0f;         // 0: 1 / sqrt(head_dim)
  void* workspace = nullptr;  // DecodeAttentionWorkspaceBytes(...) bytes
  size_t workspace_bytes = 0;
  // The kernel queued just before may have written positions before ctx - 1 too (speculative
  // verification as decode rows writes every drafted position): read no key or value before it
  // has finished.
  bool fresh_span = false;
  // > 0: keys per context partition, whatever the number of sequences (a multiple of
  // kDecodePartition), so that a sequence's sums run in the same order in any batch; 0: chosen
  // to fill the GPU for this many sequences.
  int fixed_partition = 0;
};

size_t DecodeAttentionWorkspaceBytes(int num_seqs, int num_heads, int head_dim, int max_context);

// Preconditions (asserted): head_dim in {64, 128}; num_heads / num_kv_heads <= 8; workspace
// large enough. Not checkable: the kernel queued just before this one on the stream may write
// only each sequence's newest position (ctx - 1) of the cache (what a decode step's RoPE does):
// older keys and values are read before waiting for that kernel (programmatic dependent launch).
void DecodeAttentionForward(const DecodeAttentionArgs& args, const KvCacheLayer& cache,
                            cudaStream_t stream);

// The context partitions of DecodeAttentionForward's grid for `args` (num_seqs, max_context,
// fixed_partition) over `cache` (head_dim 64 or 128): what a kernel that reproduces its sums
// (persistent_decode.h) cuts each context by.
int DecodeAttentionGridSplits(const DecodeAttentionArgs& args, const KvCacheLayer& cache);

}  // namespace dq::cuda
