#include "engine/grammar/token_vocabulary.h"

#include <algorithm>
#include <utility>

#include "common/tokenizer/tokenizer.h"

namespace dq::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes_by_id, int32_t vocab_size,
                                 std::vector<int32_t> eos_ids,
                                 std::vector<std::pair<int32_t, std::string>> first_bytes)
    : bytes_(std::move(bytes_by_id)),
      vocab_size_(std::max<int32_t>(vocab_size, static_cast<int32_t>(bytes_.size()))),
      eos_ids_(std::move(eos_ids)),
      first_(std::move(first_bytes)) {
  for (int32_t id : eos_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) bytes_[id].clear();
  }
  // Ids a grammar never allows stay so as the first token too.
  std::erase_if(first_, [&](const auto& f) {
    return f.first < 0 || static_cast<size_t>(f.first) >= bytes_.size() ||
           bytes_[f.first].empty() || f.second == bytes_[f.first];
  });
  std::sort(first_.begin(), first_.end());
  BuildTrie();
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromTokenizer(
    const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  std::vector<std::pair<int32_t, std::string>> first;
  const std::string_view strip = tokenizer.strip_content();
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    bytes[id] = std::string(tokenizer.TokenBytes(id));
    // What IncrementalDetokenizer writes for it first: FirstTokenBytes less the Strip
    // decoder's leading cut (a token it strips to nothing writes nothing: never allowed).
    std::string_view f = tokenizer.FirstTokenBytes(id);
    for (int n = tokenizer.strip_start(); n > 0 && !strip.empty() && f.starts_with(strip); --n) {
      f.remove_prefix(strip.size());
    }
    if (f != bytes[id]) first.emplace_back(id, std::string(f));
  }
  return std::make_shared<const TokenVocabulary>(std::move(bytes), vocab_size, std::move(eos_ids),
                                                 std::move(first));
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
