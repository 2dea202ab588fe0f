// A batch of work for one forward pass: new tokens for one or more sequences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/kvcache/kv_block_pool.h"

namespace dq {

enum class Phase { kPrefill, kDecode };

// `tokens` are appended to `kv` at positions kv->num_tokens, kv->num_tokens + 1, ...
struct BatchItem {
  KvSequence* kv = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every new position, not just the last (prompt logprobs)
};

struct Batch {
  Phase phase = Phase::kDecode;
  std::vector<BatchItem> items;

  int64_t num_tokens() const {
    int64_t n = 0;
    for (const auto& it : items) n += static_cast<int64_t>(it.tokens.size());
    return n;
  }
};

// Logits from a forward pass, row-major [rows, vocab]. Row order: for each item in batch order,
// every new position if all_logits, else only the last.
struct BatchLogits {
  int vocab = 0;
  std::vector<float> values;
  std::vector<int64_t> item_first_row;  // first row of each item

  const float* row(int64_t r) const { return values.data() + r * vocab; }
  // Logits that predict the token after item `i`'s last new token.
  const float* last(size_t i, const Batch& b) const {
    const int64_t n = b.items[i].all_logits ? static_cast<int64_t>(b.items[i].tokens.size()) : 1;
    return row(item_first_row[i] + n - 1);
  }
};

}  // namespace dq
