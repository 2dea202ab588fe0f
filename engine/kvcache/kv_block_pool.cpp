#include "engine/kvcache/kv_block_pool.h"

#include <algorithm>
#include <cassert>

namespace dq {

KvBlockPool::KvBlockPool(const KvCacheOptions& options) : options_(options) {
  if (options_.host_storage) {
    const size_t n = static_cast<size_t>(options_.num_layers) * LayerStride();
    keys_.assign(n, 0.0f);
    values_.assign(n, 0.0f);
  }
  for (int32_t b = 0; b < options_.num_blocks; ++b) free_.insert(free_.end(), b);
}

std::vector<int32_t> KvBlockPool::allocate(int n) {
  assert(can_allocate(n));
  std::vector<int32_t> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    out.push_back(*free_.begin());
    free_.erase(free_.begin());
  }
  return out;
}

void KvBlockPool::free(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    assert(b >= 0 && b < options_.num_blocks);
    [[maybe_unused]] const bool inserted = free_.insert(b).second;
    assert(inserted && "block freed twice");
  }
}

bool KvBlockPool::can_extend(const KvSequence& seq, int new_tokens) const {
  const int need = BlocksFor(new_tokens) - static_cast<int>(seq.blocks.size());
  return need <= 0 || can_allocate(need);
}

void KvBlockPool::extend(KvSequence& seq, int new_tokens) {
  const int need = BlocksFor(new_tokens) - static_cast<int>(seq.blocks.size());
  if (need <= 0) return;
  for (int32_t b : allocate(need)) seq.blocks.push_back(b);
}

void KvBlockPool::truncate(KvSequence& seq, int tokens) {
  tokens = std::max(0, tokens);
  seq.num_tokens = std::min(seq.num_tokens, tokens);
  const size_t keep = static_cast<size_t>(BlocksFor(tokens));
  if (seq.blocks.size() <= keep) return;
  free(std::span<const int32_t>(seq.blocks).subspan(keep));
  seq.blocks.resize(keep);
}

void KvBlockPool::release(KvSequence& seq) {
  free(seq.blocks);
  seq.blocks.clear();
  seq.num_tokens = 0;
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
