#include "common/tokenizer/added_tokens.h"

#include <algorithm>

#include "common/tokenizer/utf8.h"

namespace dq::tok_internal {
namespace {

// Start of the character that ends just before `pos` (pos > 0).
size_t PrevCharStart(std::string_view text, size_t pos) {
  size_t i = pos - 1;
  while (i > 0 && pos - i < 4 && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

bool IsUnicodeWhitespace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedTokenEntry> tokens)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& content = tokens_[t].content;
    if (content.empty()) continue;
    first_bytes_[static_cast<uint8_t>(content[0])] = true;
    int32_t node = 0;
    for (char c : content) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(
            std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0})),
            {byte, child});
        nodes_.emplace_back();
      }
      node = child;
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0}));
  return it != children.end() && it->first == byte ? it->second : -1;
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t* end) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t emitted = 0;  // Text before this is already in *out.
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = 0;
    const int32_t t =
        first_bytes_[static_cast<uint8_t>(text[pos])] ? LongestAt(text, pos, &end) : -1;
    if (t < 0) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    char32_t cp = 0;
    if (tokens_[t].lstrip) {
      while (begin > emitted) {
        const size_t prev = PrevCharStart(text, begin);
        if (DecodeUtf8(text, prev, &cp) <= 0 || !IsUnicodeWhitespace(cp)) break;
        begin = prev;
      }
    }
    if (tokens_[t].rstrip) {
      int len = 0;
      while (end < text.size() && (len = DecodeUtf8(text, end, &cp)) > 0 &&
             IsUnicodeWhitespace(cp)) {
        end += static_cast<size_t>(len);
      }
    }
    if (begin > emitted) out->push_back({text.substr(emitted, begin - emitted), -1});
    out->push_back({text.substr(begin, end - begin), tokens_[t].id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace dq::tok_internal
