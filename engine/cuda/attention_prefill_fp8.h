// Causal prefill attention with FP8 (e4m3) tensor-core inputs, for a phase that computes in FP8
// (W8A8): the compute-bound prefill gets FP8 attention as it gets FP8 linears. Same contract as
// PrefillAttentionForward (attention_prefill.h: variable-length batch, cached prefixes through
// the block table, GQA, bf16 output); the K/V cache itself stays bf16.
//
// Two steps per layer:
//  1. Quantize (attention_prefill_fp8.cu): per sequence and KV head, the amax of every K and V
//     channel over the whole context; K and V become e4m3 with one scale per channel (K's scale
//     is folded into Q, V's applied to the output), Q with one scale per token and head. Written
//     into the workspace already in the tiles' shared-memory layout (128-byte swizzle; V
//     transposed, keys permuted to match the P registers), so the attention kernel loads each
//     16 KiB tile with one bulk copy.
//  2. Attention: a producer warpgroup (one thread issuing bulk copies) feeds K and V^T tiles
//     through a two-stage ring; two consumer warpgroups of 64 query rows each overlap the
//     S = Q K^T of tile j with the P V of tile j-1 and the softmax. P is rounded to e4m3 (times
//     2^8, so that small weights keep precision).
//
// Accuracy: e4m3 keeps 3 mantissa bits; against exact attention the output differs by a few
// percent of its scale. tests/gpu/attention_test.cpp (PrefillFp8MatchesCpuEmulation) checks the
// kernel against cpu::Fp8PagedAttention (engine/cpu/fp8_attention.h), the scheme emulated on the
// CPU, which also measures its effect on a real model (docs/fidelity.md).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/attention_prefill.h"
#include "engine/cuda/kv_cache.h"

namespace dq::cuda {

constexpr int kFp8AttentionTile = 128;  // query rows per q tile, keys per key tile

// Capability query: whether the FP8 kernel handles this cache (head_dim 128, the Hopper build).
bool PrefillAttentionFp8Supported(const KvCacheLayer& cache);

// Workspace for batches of up to `q_tiles` query tiles and `key_tiles` key tiles in all (each
// sequence rounds its new tokens and its context up to whole tiles) over `max_seqs` sequences.
size_t PrefillAttentionFp8WorkspaceBytes(int q_tiles, int key_tiles, int max_seqs, int num_heads,
                                         int num_kv_heads);

struct PrefillAttentionFp8Args {
  PrefillAttentionArgs attn;                   // as for PrefillAttentionForward
  const int32_t* cu_q_tiles = nullptr;         // [num_seqs + 1]: query tiles before sequence s
  const int32_t* cu_key_tiles = nullptr;       // [num_seqs + 1]: key tiles before sequence s
  int total_q_tiles = 0, total_key_tiles = 0;  // host copies of the last entries
  int max_key_tiles = 0;                       // host: most key tiles of one sequence
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Host helper: fills cu_q_tiles / cu_key_tiles (num_seqs + 1 each) from the per-sequence new
// token counts and context lengths, and the totals / maximum of `args`.
void PlanFp8AttentionTiles(const int32_t* new_tokens, const int32_t* contexts, int num_seqs,
                           int32_t* cu_q_tiles, int32_t* cu_key_tiles,
                           PrefillAttentionFp8Args* args);

// Preconditions (asserted): PrefillAttentionFp8Supported(cache); the workspace holds the batch's
// tiles (PrefillAttentionFp8WorkspaceBytes); q rows 16-byte aligned. Capture-safe.
void PrefillAttentionFp8Forward(const PrefillAttentionFp8Args& args, const KvCacheLayer& cache,
                                cudaStream_t stream);

}  // namespace dq::cuda
