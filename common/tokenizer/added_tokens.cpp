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

// Where the whitespace run ending at `begin` starts, not before `floor`.
size_t WhitespaceStart(std::string_view text, size_t begin, size_t floor) {
  char32_t cp = 0;
  while (begin > floor) {
    const size_t prev = PrevCharStart(text, begin);
    if (prev < floor || DecodeUtf8(text, prev, &cp) <= 0 || !IsUnicodeWhitespace(cp)) break;
    begin = prev;
  }
  return begin;
}

// Where the whitespace run starting at `end` ends, not after `ceiling`.
size_t WhitespaceEnd(std::string_view text, size_t end, size_t ceiling) {
  char32_t cp = 0;
  int len = 0;
  while (end < ceiling && (len = DecodeUtf8(text, end, &cp)) > 0 && IsUnicodeWhitespace(cp) &&
         end + static_cast<size_t>(len) <= ceiling) {
    end += static_cast<size_t>(len);
  }
  return end;
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

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t special_limit,
                                     size_t* end) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = Child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    const int32_t t = nodes_[node].token;
    // A special token that would run past the limit is skipped, so a shorter match at the same
    // position (a non-special token) can still win.
    if (t >= 0 && (!tokens_[t].special || i + 1 <= special_limit)) {
      best = t;
      *end = i + 1;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::span<const TextRange> no_special,
                              std::vector<Segment>* out) const {
  size_t emitted = 0;  // Text before this is already in *out.
  size_t pos = 0;
  size_t r = 0;  // no_special[r] is the first range that ends after pos.
  while (pos < text.size()) {
    if (!first_bytes_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    while (r < no_special.size() && no_special[r].end <= pos) ++r;
    // A special token must lie between the ranges around pos; inside a range (ceiling <= pos)
    // none can match.
    const size_t floor = r > 0 ? no_special[r - 1].end : 0;
    const size_t ceiling = r < no_special.size() ? no_special[r].begin : text.size();
    size_t end = 0;
    const int32_t t = LongestAt(text, pos, ceiling, &end);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedTokenEntry& token = tokens_[t];
    // Nor may a special token's lstrip/rstrip swallow whitespace inside a range.
    const size_t strip_floor = token.special ? std::max(emitted, floor) : emitted;
    const size_t strip_ceiling = token.special ? ceiling : text.size();
    const size_t begin = token.lstrip ? WhitespaceStart(text, pos, strip_floor) : pos;
    if (token.rstrip) end = WhitespaceEnd(text, end, strip_ceiling);
    if (begin > emitted) out->push_back({text.substr(emitted, begin - emitted), -1});
    out->push_back({text.substr(begin, end - begin), token.id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace dq::tok_internal
