// Finds added tokens (special or not) in text: at each position the leftmost match wins and,
// among matches starting there, the longest (HF tokenizers' AddedVocabulary). lstrip/rstrip
// tokens also swallow the whitespace before/after them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dq::tok_internal {

struct AddedTokenEntry {
  int32_t id = -1;
  std::string content;
  bool lstrip = false;
  bool rstrip = false;
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

  // Splits `text` (valid UTF-8) into segments, in order.
  void Split(std::string_view text, std::vector<Segment>* out) const;
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // Sorted by byte.
    int32_t token = -1;                                 // Index into tokens_, or -1.
  };
  int32_t Child(int32_t node, uint8_t byte) const;
  // Index of the longest token that starts at text[pos], or -1; *end is where it ends.
  int32_t LongestAt(std::string_view text, size_t pos, size_t* end) const;

  std::vector<AddedTokenEntry> tokens_;
  std::vector<Node> nodes_;
  bool first_bytes_[256] = {};
};

// Rust's char::is_whitespace (the Unicode White_Space property).
bool IsUnicodeWhitespace(char32_t cp);

}  // namespace dq::tok_internal
