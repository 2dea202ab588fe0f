#include "engine/grammar/token_vocabulary.h"

#include <algorithm>
#include <utility>

#include "common/tokenizer/tokenizer.h"

namespace dq::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes_by_id, int32_t vocab_size,
                                 std::vector<int32_t> eos_ids)
    : bytes_(std::move(bytes_by_id)),
      vocab_size_(std::max<int32_t>(vocab_size, static_cast<int32_t>(bytes_.size()))),
      eos_ids_(std::move(eos_ids)) {
  for (int32_t id : eos_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) bytes_[id].clear();
  }
  BuildTrie();
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(
    const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) bytes[id] = std::string(tokenizer.TokenBytes(id));
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), vocab_size, std::move(eos_ids));
}

bool TokenVocabulary::IsEos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

void TokenVocabulary::BuildTrie() {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!bytes_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(sorted_.begin(), sorted_.end(),
                   [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  trie_.assign(1, TrieNode{});
  BuildNode(0, 0, static_cast<int32_t>(sorted_.size()), 0);
}

// Fills node (covering sorted_[lo, hi), all sharing their first `depth` bytes) and its subtree.
int32_t TokenVocabulary::BuildNode(int32_t node, int32_t lo, int32_t hi, size_t depth) {
  auto byte_at = [&](int32_t i) { return static_cast<uint8_t>(bytes_[sorted_[i]][depth]); };
  int32_t i = lo;
  while (i < hi && bytes_[sorted_[i]].size() == depth) ++i;  // shorter strings sort first
  trie_[node].tokens_begin = lo;
  trie_[node].tokens_end = i;
  trie_[node].subtree_begin = lo;
  trie_[node].subtree_end = hi;
  // Children first (contiguous), then their subtrees.
  std::vector<std::pair<int32_t, int32_t>> groups;
  while (i < hi) {
    int32_t j = i + 1;
    while (j < hi && byte_at(j) == byte_at(i)) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  const int32_t first = static_cast<int32_t>(trie_.size());
  trie_[node].first_child = groups.empty() ? -1 : first;
  trie_[node].num_children = static_cast<int32_t>(groups.size());
  for (const auto& [a, b] : groups) {
    TrieNode child;
    child.byte = byte_at(a);
    trie_.push_back(child);
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    BuildNode(first + static_cast<int32_t>(k), groups[k].first, groups[k].second, depth + 1);
  }
  return node;
}

}  // namespace dq::grammar
