// Finds added tokens (special or not) in text: at each position the leftmost match wins and,
// among matches starting there, the longest (HF tokenizers' AddedVocabulary). lstrip/rstrip
// tokens also swallow the whitespace before/after them. Special tokens can be kept out of given
// byte ranges (untrusted text inside a trusted prompt).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/text_range.h"

namespace dq::tok_internal {

struct AddedTokenEntry {
  int32_t id = -1;
  std::string content;
  bool lstrip = false;
  bool rstrip = false;
  bool special = false;  // Only special tokens are kept out of Split's `no_special` ranges.
};

// A run of plain text (id < 0) or one added token (text is what it matched).
struct Segment {
  std::string_view text;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedTokenEntry> tokens);

  // Splits `text` (valid UTF-8) into segments, in order. A special token is matched only where
  // its text overlaps no `no_special` range (sorted, disjoint), and its lstrip/rstrip stops at
  // one: in the ranges special tokens are plain text, as with HF's split_special_tokens.
  // Non-special tokens match everywhere.
  void Split(std::string_view text, std::span<const TextRange> no_special,
             std::vector<Segment>* out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // Sorted by byte.
    int32_t token = -1;                                 // Index into tokens_, or -1.
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  // Index of the longest token that starts at text[pos], or -1; *end is where it ends. A special
  // token must end by `special_limit`.
  int32_t LongestAt(std::string_view text, size_t pos, size_t special_limit, size_t* end) const;

  std::vector<AddedTokenEntry> tokens_;
  std::vector<Node> nodes_;
  bool first_bytes_[256] = {};
};

// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsUnicodeWhitespace(char32_t cp);

}  // namespace dq::tok_internal
