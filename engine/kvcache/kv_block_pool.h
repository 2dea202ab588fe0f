// Paged KV cache storage: fixed-size blocks of tokens, one region per layer for K and for V.
// Blocks are reference-counted, and full blocks of finished prompts can be kept under the hash
// chain of their tokens so that later sequences with the same prefix share them (prefix caching).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kvcache/kv_tensor_layout.h"
#include "engine/kvcache/state_slot_pool.h"

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
  // A hybrid model's fixed per-sequence state (SequenceStateSpec::slot_floats): each sequence
  // takes one of `num_state_slots` slots when it first gets blocks. 0: none.
  int64_t state_slot_floats = 0;
  int num_state_slots = 0;
};

// A sequence's block table: the blocks holding its tokens in order, and how many tokens are
// cached. Token t lives in blocks[t / block_size] at slot t % block_size.
// `state_slot`: its slot of the pool's state slots (-1: none; a hybrid model's sequences get one
// with their first blocks), holding the state after its num_tokens tokens.
struct KvSequence {
  std::vector<int32_t> blocks;
  int num_tokens = 0;
  int32_t state_slot = -1;
};

struct PrefixCacheStats {
  int64_t queried_blocks = 0;  // full blocks looked up by AcquirePrefix
  int64_t hit_blocks = 0;      // of which were cached
  int64_t evicted_blocks = 0;  // cached blocks reused for other content
  int cached_blocks = 0;       // cached now (in use or evictable)
};

// Owns the KV memory (fp32 on the CPU backend). Block layout, per layer and for K and V
// separately: [block_size tokens][num_kv_heads][head_dim], so a run of consecutive block ids is
// one contiguous region per layer (what KV transfer ships).
//
// Every allocated block has a reference count (1 from allocate, +1 per AcquirePrefix); free()
// drops one. A block whose count reaches 0 is free again, unless it is cached: then it keeps
// its KV and its hash until an allocation needs it (least recently used first). Cached blocks
// are never written again: only full blocks of a prefix are published, and truncate() un-caches
// a block it cuts into.
class KvBlockPool {
 public:
  explicit KvBlockPool(const KvCacheOptions& options);

  const KvCacheOptions& options() const { return options_; }
  int block_size() const { return options_.block_size; }
  // Blocks an allocation can take now: free ones and unreferenced cached ones.
  int num_free_blocks() const { return static_cast<int>(free_.size() + evictable_.size()); }
  // Blocks needed to hold `tokens` tokens.
  int BlocksFor(int tokens) const { return (tokens + block_size() - 1) / block_size(); }

  // Pure check: are `n` blocks free?
  bool can_allocate(int n) const { return n <= num_free_blocks(); }
  // Takes `n` blocks, each with one reference: free ones first, lowest ids first so that a
  // request gets few contiguous runs, then evicted cached ones. Precondition: can_allocate(n).
  std::vector<int32_t> allocate(int n);
  // Drops one reference to each block. Precondition: each holds a reference.
  void free(std::span<const int32_t> blocks);

  // Pure check: can `seq` grow to `new_tokens` tokens with the free blocks (and, with state
  // slots, a free slot when it has none)?
  bool can_extend(const KvSequence& seq, int new_tokens) const;
  // Adds the blocks `seq` needs to hold `new_tokens` tokens (does not change num_tokens), and a
  // zeroed state slot when the pool has slots and `seq` none. Precondition: can_extend.
  void extend(KvSequence& seq, int new_tokens);
  // Cuts `seq` back to its first `tokens` tokens (speculative decoding's rollback): num_tokens
  // drops to at most `tokens` and the blocks past BlocksFor(tokens) return to the pool. The K/V
  // left in the kept blocks past `tokens` is stale and is overwritten as the sequence regrows.
  // A state slot holds no history: cut to 0 it is zeroed; cut elsewhere below num_tokens it
  // would be stale, so callers refuse rollback for models with state (has_state_slots()).
  void truncate(KvSequence& seq, int tokens);
  // Frees all of `seq`'s blocks and its state slot and empties it.
  void release(KvSequence& seq);

  // The per-sequence state slots (KvCacheOptions::state_slot_floats).
  bool has_state_slots() const { return slots_.enabled(); }
  StateSlotPool& state_slots() { return slots_; }
  const StateSlotPool& state_slots() const { return slots_; }
  // Sequences that can still start (each takes a slot); unbounded without slots.
  int num_free_sequences() const;

  // Prefix caching. Pure check: how many leading full blocks of `tokens` are cached.
  int CachedPrefixBlocks(std::span<const int32_t> tokens) const;
  // Takes a reference to each cached leading full block of `tokens` and returns them in token
  // order (counted in prefix_stats()). Their KV is that of those tokens at those positions.
  std::vector<int32_t> AcquirePrefix(std::span<const int32_t> tokens);
  // Caches `seq`'s full blocks, whose KV is final and holds `tokens` from position 0. A block
  // whose content another block already caches stays uncached (and is freed as usual).
  void Publish(const KvSequence& seq, std::span<const int32_t> tokens);
  int refcount(int32_t block) const { return refs_[block]; }
  PrefixCacheStats prefix_stats() const;

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
  // The layout of keys_data() and values_data() (or, without host storage, of the cache the
  // backend holds with its own element size).
  KvTensorLayout layout(int elem_bytes = sizeof(float)) const {
    return KvTensorLayout::Paged(options_.num_layers, options_.num_blocks, options_.block_size,
                                 options_.num_kv_heads, options_.head_dim, elem_bytes);
  }
  uint64_t layer_stride_bytes() const { return layout().layer_stride_bytes(); }
  uint64_t block_bytes() const { return layout().block_bytes; }
  // Byte offset of (layer, block) inside keys_data() / values_data().
  uint64_t block_offset(int layer, int32_t block) const { return layout().offset(layer, block); }

 private:
  int64_t TokenStride() const { return int64_t{options_.num_kv_heads} * options_.head_dim; }
  int64_t LayerStride() const {
    return int64_t{options_.num_blocks} * options_.block_size * TokenStride();
  }
  float* At(std::vector<float>& v, int layer, int32_t block, int slot) const;
  const float* At(const std::vector<float>& v, int layer, int32_t block, int slot) const;

  struct Cached {
    uint64_t hash = 0;
    uint64_t tick = 0;  // key in evictable_ while unreferenced
    std::vector<int32_t> tokens;
  };
  // The chain hash of each leading full block of `tokens`.
  std::vector<uint64_t> ChainHashes(std::span<const int32_t> tokens) const;
  // The cached block holding `tokens` (one block's) under `hash`, or -1.
  int32_t FindCached(uint64_t hash, std::span<const int32_t> tokens) const;
  void Uncache(int32_t block);

  KvCacheOptions options_;
  StateSlotPool slots_;
  std::vector<float> keys_;
  std::vector<float> values_;
  std::set<int32_t> free_;  // unreferenced and uncached
  std::vector<int32_t> refs_;
  std::unordered_map<int32_t, Cached> cached_;     // by block id
  std::unordered_map<uint64_t, int32_t> by_hash_;  // chain hash -> block
  std::map<uint64_t, int32_t> evictable_;  // cached, unreferenced: tick -> block (LRU first)
  uint64_t tick_ = 0;
  PrefixCacheStats stats_;
};

}  // namespace dq
