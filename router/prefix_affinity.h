// Which decode worker was given which prompts, so that a request goes to the decode worker whose
// prefix cache (dq-decode --prefix-cache, WorkerIdentity.prefix_cache) likely holds its prefix:
// the next turn of a conversation starts with the previous turn's prompt. Approximate by design
// (SGLang's router keeps an approximate tree the same way): it remembers the hash chain of each
// routed prompt's full blocks per worker, forgets the least recently used chains beyond its
// capacity, and never asks the workers, so a block the worker has evicted since costs only a
// cache miss there.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace dq::router {

class PrefixAffinity {
 public:
  // `capacity`: block chains remembered over all workers.
  explicit PrefixAffinity(size_t capacity = size_t{1} << 16) : capacity_(capacity) {}

  // `worker` was given a prompt of `tokens`, in blocks of `block_size` tokens. A chain another
  // worker had is now this one's (the latest to get it is the likeliest to still hold it).
  void Record(std::string_view worker, std::span<const int32_t> tokens, int block_size);

  struct Match {
    std::string worker;
    int blocks = 0;  // leading full blocks of the prompt remembered on that worker
  };
  // The worker remembered for the longest run of leading full blocks of `tokens` among those
  // `eligible` accepts; nullopt when none. Thread-safe, as Record.
  std::optional<Match> Longest(std::span<const int32_t> tokens, int block_size,
                               const std::function<bool(std::string_view)>& eligible) const;

  size_t size() const;

 private:
  struct Entry {
    uint64_t chain = 0;
    std::string worker;
  };
  mutable std::mutex mu_;
  size_t capacity_;
  mutable std::list<Entry> lru_;  // most recently used first
  mutable std::unordered_map<uint64_t, std::list<Entry>::iterator> by_chain_;
};

// The hash of `tokens`' leading full blocks, block after block: chains[i] covers blocks 0..i.
std::vector<uint64_t> BlockChainHashes(std::span<const int32_t> tokens, int block_size);

}  // namespace dq::router
