// Paged KV cache storage: fixed-size blocks of tokens, one region per layer for K and for V.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <vector>

namespace dq {

struct KvCacheOptions {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  int num_blocks = 0;
  // false: only block ids are managed here; the K/V bytes live elsewhere (a device backend's
  // cache with this layout), and key()/value()/keys_data() must not be used.
  bool host_storage = true;
};

// A sequence's block table: the blocks holding its tokens in order, and how many tokens are
// cached. Token t lives in blocks[t / block_size] at slot t % block_size.
struct KvSequence {
  std::vector<int32_t> blocks;
  int num_tokens = 0;
};

// Owns the KV memory (fp32 on the CPU backend). Block layout, per layer and for K and V
// separately: [block_size tokens][num_kv_heads][head_dim], so a run of consecutive block ids is
// one contiguous region per layer (what KV transfer ships).
class KvBlockPool {
 public:
  explicit KvBlockPool(const KvCacheOptions& options);

  const KvCacheOptions& options() const { return options_; }
  int block_size() const { return options_.block_size; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  // Blocks needed to hold `tokens` tokens.
  int BlocksFor(int tokens) const { return (tokens + block_size() - 1) / block_size(); }

  // Pure check: are `n` blocks free?
  bool can_allocate(int n) const { return n <= num_free_blocks(); }
  // Takes `n` free blocks, lowest ids first so that a request gets few contiguous runs.
  // Precondition: can_allocate(n).
  std::vector<int32_t> allocate(int n);
  // Returns blocks to the pool. Precondition: each was allocated and not yet freed.
  void free(std::span<const int32_t> blocks);

  // Pure check: can `seq` grow to `new_tokens` tokens with the free blocks?
  bool can_extend(const KvSequence& seq, int new_tokens) const;
  // Adds the blocks `seq` needs to hold `new_tokens` tokens (does not change num_tokens).
  // Precondition: can_extend(seq, new_tokens).
  void extend(KvSequence& seq, int new_tokens);
  // Cuts `seq` back to its first `tokens` tokens (speculative decoding's rollback): num_tokens
  // drops to at most `tokens` and the blocks past BlocksFor(tokens) return to the pool. The K/V
  // left in the kept blocks past `tokens` is stale and is overwritten as the sequence regrows.
  void truncate(KvSequence& seq, int tokens);
  // Frees all of `seq`'s blocks and empties it.
  void release(KvSequence& seq);

  // Start of a token's K or V vector for `head` (num_kv_heads * head_dim floats per token).
  float* key(int layer, int32_t block, int slot) { return At(keys_, layer, block, slot); }
  float* value(int layer, int32_t block, int slot) { return At(values_, layer, block, slot); }
  const float* key(int layer, int32_t block, int slot) const {
    return At(keys_, layer, block, slot);
  }
  const float* value(int layer, int32_t block, int slot) const {
    return At(values_, layer, block, slot);
  }

  // The raw K and V storage, for registering with a KV transport: each is one region holding
  // every layer, layer after layer (layer_stride_bytes apart), and inside a layer block after
  // block (block_bytes apart). Element type: float32 ("f32").
  float* keys_data() { return keys_.data(); }
  float* values_data() { return values_.data(); }
  uint64_t region_bytes() const { return keys_.size() * sizeof(float); }
  uint64_t layer_stride_bytes() const { return LayerStride() * sizeof(float); }
  uint64_t block_bytes() const { return options_.block_size * TokenStride() * sizeof(float); }
  // Byte offset of (layer, block) inside keys_data() / values_data().
  uint64_t block_offset(int layer, int32_t block) const {
    return layer * layer_stride_bytes() + static_cast<uint64_t>(block) * block_bytes();
  }

 private:
  int64_t TokenStride() const { return int64_t{options_.num_kv_heads} * options_.head_dim; }
  int64_t LayerStride() const {
    return int64_t{options_.num_blocks} * options_.block_size * TokenStride();
  }
  float* At(std::vector<float>& v, int layer, int32_t block, int slot) const;
  const float* At(const std::vector<float>& v, int layer, int32_t block, int slot) const;

  KvCacheOptions options_;
  std::vector<float> keys_;
  std::vector<float> values_;
  std::set<int32_t> free_;
};

}  // namespace dq
