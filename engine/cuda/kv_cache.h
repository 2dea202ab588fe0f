// The device KV cache of one layer, as the kernels see it: the CPU pool's paged layout
// (engine/kvcache/kv_block_pool.h) in bf16. K and V are separate regions, each
// [num_blocks][block_size][num_kv_heads][head_dim]; token t of a sequence lives in block
// block_table[t / block_size] at slot t % block_size, i.e. at flat slot
// block * block_size + slot. A slot mapping entry < 0 means "do not write" (padding tokens).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dq::cuda {

struct KvCacheLayer {
  __nv_bfloat16* k = nullptr;
  __nv_bfloat16* v = nullptr;
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;

  __host__ __device__ int64_t token_stride() const { return int64_t{num_kv_heads} * head_dim; }
};

struct KvWriteArgs {
  const __nv_bfloat16* k = nullptr;  // [tokens, k_stride], the first num_kv_heads*head_dim used
  const __nv_bfloat16* v = nullptr;  // [tokens, v_stride]
  int64_t k_stride = 0;              // elements between tokens; 0: num_kv_heads * head_dim
  int64_t v_stride = 0;
  const int32_t* slot_mapping = nullptr;  // [tokens] flat slot, < 0: skip
  int64_t tokens = 0;
};

// Copies each token's K and V into its cache slot. (The QK-norm + RoPE kernel in rope.h does
// this fused; this one serves paths without RoPE, e.g. KV received from another worker.)
void WriteKvCache(const KvWriteArgs& args, const KvCacheLayer& cache, cudaStream_t stream);

}  // namespace dq::cuda
