// The tokenizer's vocabulary as byte strings for constrained decoding: what each token id adds
// to the output, which ids end generation (EOS), and a trie over the bytes so a grammar walks
// shared prefixes once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dq {
class Tokenizer;
}

namespace dq::grammar {

class TokenVocabulary {
 public:
  struct TrieNode {
    uint8_t byte = 0;          // the edge into this node (unused at the root)
    int32_t first_child = -1;  // children are contiguous: [first_child, first_child + count)
    int32_t num_children = 0;
    int32_t tokens_begin = 0;  // sorted_ids()[tokens_begin, tokens_end): ids whose bytes end here
    int32_t tokens_end = 0;
    int32_t subtree_begin = 0;  // sorted_ids()[subtree_begin, subtree_end): ids below (incl.)
    int32_t subtree_end = 0;
  };

  // `bytes_by_id[i]` is what id i writes; an empty string marks an id a grammar never allows
  // (special tokens, unused ids). `vocab_size` (the model's logit row, at least
  // bytes_by_id.size()) bounds every mask. `eos_ids` end generation: a grammar allows them only
  // once its document is complete.
  // `first_bytes` (id, bytes): what an id writes instead when it is the first token of the
  // output (a SentencePiece decoder drops the first token's leading space); only ids that differ.
  TokenVocabulary(std::vector<std::string> bytes_by_id, int32_t vocab_size,
                  std::vector<int32_t> eos_ids,
                  std::vector<std::pair<int32_t, std::string>> first_bytes = {});

  // From a tokenizer: every token that is not special, as Tokenizer::TokenBytes gives it
  // (byte-level and <0xNN> byte-fallback tokens as their raw bytes), and as the first token of
  // a fresh IncrementalDetokenizer writes it (FirstTokenBytes, then the Strip decoder's cut), so
  // a mask allows exactly the tokens whose emitted text the grammar accepts.
  static std::shared_ptr<const TokenVocabulary> FromTokenizer(const Tokenizer& tokenizer,
                                                              int32_t vocab_size,
                                                              std::vector<int32_t> eos_ids);

  int32_t vocab_size() const { return vocab_size_; }
  // The bytes of `id`; empty for ids a grammar never allows.
  std::string_view bytes(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < bytes_.size() ? std::string_view(bytes_[id])
                                                              : std::string_view();
  }
  // Ids whose bytes differ as the output's first token, with those bytes (sorted by id).
  const std::vector<std::pair<int32_t, std::string>>& first_bytes() const { return first_; }
  bool IsEos(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // Node 0 is the root (the empty prefix).
  const std::vector<TrieNode>& trie() const { return trie_; }
  // Allowed ids in byte order of their strings.
  std::span<const int32_t> sorted_ids() const { return sorted_; }

 private:
  void BuildTrie();
  int32_t BuildNode(int32_t node, int32_t lo, int32_t hi, size_t depth);

  std::vector<std::string> bytes_;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::pair<int32_t, std::string>> first_;
  std::vector<int32_t> sorted_;
  std::vector<TrieNode> trie_;
};

}  // namespace dq::grammar
