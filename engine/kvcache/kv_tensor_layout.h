// The byte layout of one K or V tensor of a paged KV cache, written once: layer after layer,
// block after block inside a layer, each block `block_bytes` long. The engine's KvBlockPool, both
// workers' staging buffers and lease plans, and the wire's KvRegion (layer_stride_bytes,
// block_bytes) all describe their memory with it.
#pragma once

#include <cstdint>

namespace dq {

struct KvTensorLayout {
  int num_layers = 0;
  int64_t num_blocks = 0;
  int block_size = 0;  // tokens per block
  uint64_t block_bytes = 0;

  uint64_t layer_stride_bytes() const { return static_cast<uint64_t>(num_blocks) * block_bytes; }
  uint64_t tensor_bytes() const { return num_layers * layer_stride_bytes(); }
  // Byte offset of (layer, block) from the tensor's start.
  uint64_t offset(int layer, int64_t block) const {
    return layer * layer_stride_bytes() + static_cast<uint64_t>(block) * block_bytes;
  }
  // A cache of `num_layers` x `num_blocks` blocks of `block_size` tokens, each token
  // kv_heads x head_dim values of `elem_bytes` bytes.
  static KvTensorLayout Paged(int num_layers, int64_t num_blocks, int block_size, int kv_heads,
                              int head_dim, int elem_bytes) {
    return {num_layers, num_blocks, block_size,
            static_cast<uint64_t>(block_size) * kv_heads * head_dim * elem_bytes};
  }
};

}  // namespace dq
