#include "router/prefix_affinity.h"

#include <vector>

namespace dq::router {
namespace {

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 of the running hash and the value: a different chain for a different order.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<uint64_t> BlockChainHashes(std::span<const int32_t> tokens, int block_size) {
  std::vector<uint64_t> out;
  if (block_size <= 0) return out;
  uint64_t h = 0x243f6a8885a308d3ULL;
  for (size_t b = 0; (b + 1) * block_size <= tokens.size(); ++b) {
    for (int i = 0; i < block_size; ++i) {
      h = Mix(h, static_cast<uint32_t>(tokens[b * block_size + i]));
    }
    out.push_back(h);
  }
  return out;
}

void PrefixAffinity::Record(std::string_view worker, std::span<const int32_t> tokens,
                            int block_size) {
  const std::vector<uint64_t> chains = BlockChainHashes(tokens, block_size);
  std::lock_guard lock(mu_);
  for (uint64_t c : chains) {
    if (auto it = by_chain_.find(c); it != by_chain_.end()) {
      it->second->worker = std::string(worker);
      lru_.splice(lru_.begin(), lru_, it->second);
      continue;
    }
    lru_.push_front(Entry{c, std::string(worker)});
    by_chain_[c] = lru_.begin();
    if (lru_.size() > capacity_) {
      by_chain_.erase(lru_.back().chain);
      lru_.pop_back();
    }
  }
}

std::optional<PrefixAffinity::Match> PrefixAffinity::Longest(
    std::span<const int32_t> tokens, int block_size,
    const std::function<bool(std::string_view)>& eligible) const {
  const std::vector<uint64_t> chains = BlockChainHashes(tokens, block_size);
  std::lock_guard lock(mu_);
  for (size_t n = chains.size(); n > 0; --n) {
    auto it = by_chain_.find(chains[n - 1]);
    if (it == by_chain_.end() || !eligible(it->second->worker)) continue;
    lru_.splice(lru_.begin(), lru_, it->second);
    return Match{it->second->worker, static_cast<int>(n)};
  }
  return std::nullopt;
}

size_t PrefixAffinity::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

}  // namespace dq::router
