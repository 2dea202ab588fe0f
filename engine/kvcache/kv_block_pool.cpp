#include "engine/kvcache/kv_block_pool.h"

#include <algorithm>
#include <cassert>

namespace dq {
namespace {

// FNV-1a over the parent's hash and the block's token ids: a block's hash names its whole
// prefix. Lookups compare the tokens too, so a collision can cost a hit, never a wrong one
// within a block.
uint64_t BlockHash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  return h;
}

}  // namespace

KvBlockPool::KvBlockPool(const KvCacheOptions& options)
    : options_(options),
      slots_(options.state_slot_floats, options.num_state_slots, options.host_storage) {
  if (options_.host_storage) {
    const size_t n = static_cast<size_t>(options_.num_layers) * LayerStride();
    keys_.assign(n, 0.0f);
    values_.assign(n, 0.0f);
  }
  for (int32_t b = 0; b < options_.num_blocks; ++b) free_.insert(free_.end(), b);
  refs_.assign(options_.num_blocks, 0);
}

std::vector<int32_t> KvBlockPool::allocate(int n) {
  assert(can_allocate(n));
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    int32_t b = -1;
    if (!free_.empty()) {
      b = *free_.begin();
      free_.erase(free_.begin());
    } else {
      b = evictable_.begin()->second;  // the least recently used cached block
      evictable_.erase(evictable_.begin());
      Uncache(b);
      ++stats_.evicted_blocks;
    }
    refs_[b] = 1;
    out.push_back(b);
  }
  return out;
}

void KvBlockPool::free(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    assert(b >= 0 && b < options_.num_blocks);
    assert(refs_[b] > 0 && "block freed more often than referenced");
    if (--refs_[b] > 0) continue;
    if (auto it = cached_.find(b); it != cached_.end()) {
      it->second.tick = ++tick_;
      evictable_.emplace(it->second.tick, b);
    } else {
      free_.insert(b);
    }
  }
}

bool KvBlockPool::can_extend(const KvSequence& seq, int new_tokens) const {
  if (slots_.enabled() && seq.state_slot < 0 && !slots_.can_allocate()) return false;
  const int need = BlocksFor(new_tokens) - static_cast<int>(seq.blocks.size());
  return need <= 0 || can_allocate(need);
}

void KvBlockPool::extend(KvSequence& seq, int new_tokens) {
  if (slots_.enabled() && seq.state_slot < 0) seq.state_slot = slots_.allocate();
  const int need = BlocksFor(new_tokens) - static_cast<int>(seq.blocks.size());
  if (need <= 0) return;
  for (int32_t b : allocate(need)) seq.blocks.push_back(b);
}

void KvBlockPool::truncate(KvSequence& seq, int tokens) {
  tokens = std::max(0, tokens);
  assert((seq.state_slot < 0 || tokens == 0 || tokens >= seq.num_tokens) &&
         "a state slot cannot roll back");
  if (seq.state_slot >= 0 && tokens == 0) slots_.clear(seq.state_slot);
  seq.num_tokens = std::min(seq.num_tokens, tokens);
  const size_t keep = static_cast<size_t>(BlocksFor(tokens));
  // The kept block that `tokens` cuts into will be rewritten: it no longer holds what its hash
  // says. Shared, it would be rewritten under another sequence.
  if (tokens % block_size() != 0 && keep <= seq.blocks.size()) {
    const int32_t partial = seq.blocks[keep - 1];
    assert(refs_[partial] == 1 && "truncating into a shared block");
    if (cached_.count(partial) != 0) Uncache(partial);
  }
  if (seq.blocks.size() <= keep) return;
  free(std::span<const int32_t>(seq.blocks).subspan(keep));
  seq.blocks.resize(keep);
}

void KvBlockPool::release(KvSequence& seq) {
  free(seq.blocks);
  seq.blocks.clear();
  seq.num_tokens = 0;
  if (seq.state_slot >= 0) slots_.release(seq.state_slot);
  seq.state_slot = -1;
}

int KvBlockPool::num_free_sequences() const {
  return slots_.enabled() ? slots_.num_free() : options_.num_blocks + 1;
}

std::vector<uint64_t> KvBlockPool::ChainHashes(std::span<const int32_t> tokens) const {
  const size_t bs = static_cast<size_t>(block_size());
  std::vector<uint64_t> hashes;
  uint64_t parent = 0;
  for (size_t i = 0; (i + 1) * bs <= tokens.size(); ++i) {
    parent = BlockHash(parent, tokens.subspan(i * bs, bs));
    hashes.push_back(parent);
  }
  return hashes;
}

int32_t KvBlockPool::FindCached(uint64_t hash, std::span<const int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const std::vector<int32_t>& held = cached_.at(it->second).tokens;
  return std::equal(held.begin(), held.end(), tokens.begin(), tokens.end()) ? it->second : -1;
}

int KvBlockPool::CachedPrefixBlocks(std::span<const int32_t> tokens) const {
  const size_t bs = static_cast<size_t>(block_size());
  const std::vector<uint64_t> hashes = ChainHashes(tokens);
  int n = 0;
  while (n < static_cast<int>(hashes.size()) &&
         FindCached(hashes[n], tokens.subspan(n * bs, bs)) >= 0) {
    ++n;
  }
  return n;
}

std::vector<int32_t> KvBlockPool::AcquirePrefix(std::span<const int32_t> tokens) {
  const size_t bs = static_cast<size_t>(block_size());
  const std::vector<uint64_t> hashes = ChainHashes(tokens);
  std::vector<int32_t> out;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const int32_t b = FindCached(hashes[i], tokens.subspan(i * bs, bs));
    if (b < 0) break;
    if (refs_[b] == 0) evictable_.erase(cached_.at(b).tick);
    ++refs_[b];
    out.push_back(b);
  }
  stats_.queried_blocks += static_cast<int64_t>(hashes.size());
  stats_.hit_blocks += static_cast<int64_t>(out.size());
  return out;
}

void KvBlockPool::Publish(const KvSequence& seq, std::span<const int32_t> tokens) {
  const size_t bs = static_cast<size_t>(block_size());
  const std::vector<uint64_t> hashes = ChainHashes(tokens);
  assert(hashes.size() <= seq.blocks.size());
  for (size_t i = 0; i < hashes.size(); ++i) {
    const int32_t b = seq.blocks[i];
    assert(refs_[b] > 0);
    if (cached_.count(b) != 0 || by_hash_.count(hashes[i]) != 0) continue;
    const std::span<const int32_t> held = tokens.subspan(i * bs, bs);
    cached_.emplace(b, Cached{hashes[i], 0, std::vector<int32_t>(held.begin(), held.end())});
    by_hash_.emplace(hashes[i], b);
  }
}

void KvBlockPool::Uncache(int32_t block) {
  auto it = cached_.find(block);
  if (it == cached_.end()) return;
  if (auto h = by_hash_.find(it->second.hash); h != by_hash_.end() && h->second == block) {
    by_hash_.erase(h);
  }
  cached_.erase(it);
}

PrefixCacheStats KvBlockPool::prefix_stats() const {
  PrefixCacheStats s = stats_;
  s.cached_blocks = static_cast<int>(cached_.size());
  return s;
}

float* KvBlockPool::At(std::vector<float>& v, int layer, int32_t block, int slot) const {
  return v.data() + layer * LayerStride() +
         (int64_t{block} * options_.block_size + slot) * TokenStride();
}

const float* KvBlockPool::At(const std::vector<float>& v, int layer, int32_t block,
                             int slot) const {
  return v.data() + layer * LayerStride() +
         (int64_t{block} * options_.block_size + slot) * TokenStride();
}

}  // namespace dq
