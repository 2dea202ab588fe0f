#include "engine/grammar/extra_key_rule.h"

#include <algorithm>
#include <array>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

namespace dq::grammar {
namespace {

struct Range {
  uint8_t lo, hi;
};

// The well-formed UTF-8 characters a JSON string may hold unescaped (RFC 3629: no overlongs,
// no surrogates, nothing past U+10FFFF; no '"', '\\' or control characters), as byte ranges
// per position.
const std::vector<std::vector<Range>>& UnescapedChars() {
  static const auto* chars = new std::vector<std::vector<Range>>{
      {{0x20, 0x21}},
      {{0x23, 0x5B}},
      {{0x5D, 0x7F}},
      {{0xC2, 0xDF}, {0x80, 0xBF}},
      {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
      {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
      {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
      {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
  };
  return *chars;
}

// Edges from `from` to `to` for every character of shape `seq` (from position `i` on) except
// the ones in `excluded` (UTF-8 characters sharing the bytes matched so far).
void OtherChars(GrammarBuilder& b, int32_t from, int32_t to, std::span<const Range> seq,
                const std::vector<std::string>& excluded, size_t i) {
  const Range r = seq[i];
  const bool last = i + 1 == seq.size();
  std::map<uint8_t, std::vector<std::string>> hit;  // excluded chars by their i-th byte
  for (const std::string& c : excluded) {
    const uint8_t byte = static_cast<uint8_t>(c[i]);
    if (c.size() == seq.size() && byte >= r.lo && byte <= r.hi) hit[byte].push_back(c);
  }
  auto free_tail = [&](uint8_t lo, uint8_t hi) {  // bytes no excluded char continues with
    if (last) return b.Bytes(from, lo, hi, to);
    const int32_t next = b.NewState(b.RuleOf(from));
    b.Bytes(from, lo, hi, next);
    OtherChars(b, next, to, seq, {}, i + 1);
  };
  int lo = r.lo;
  for (const auto& [byte, chars] : hit) {
    if (byte > lo) free_tail(static_cast<uint8_t>(lo), static_cast<uint8_t>(byte - 1));
    lo = byte + 1;
    if (last) continue;  // the whole character is excluded
    const int32_t next = b.NewState(b.RuleOf(from));
    b.Byte(from, byte, next);
    OtherChars(b, next, to, seq, chars, i + 1);
  }
  if (lo <= r.hi) free_tail(static_cast<uint8_t>(lo), r.hi);
}

// Length of the UTF-8 character starting with `lead`.
size_t CharLen(uint8_t lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// Whether `s` is written as itself inside a JSON string (no character needs an escape).
bool Unescaped(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<uint8_t>(c) < 0x20;
  });
}

}  // namespace

int32_t AddExtraKeyRule(GrammarBuilder& b, std::string name,
                        std::span<const std::string> declared) {
  const int32_t rule = b.AddRule(std::move(name));
  const int32_t end = b.NewState(rule);
  b.Final(end);
  const int32_t free = b.NewState(rule);  // past every declared name: anything goes
  for (const auto& seq : UnescapedChars()) OtherChars(b, free, free, seq, {}, 0);
  b.Byte(free, '"', end);
  // A trie of the declared names, by characters; node 0 is right after the opening quote.
  struct Node {
    int32_t state;
    bool is_name = false;
    std::map<std::string, size_t> children;
  };
  std::vector<Node> trie{Node{b.NewState(rule), false, {}}};
  b.Byte(b.Start(rule), '"', trie[0].state);
  for (const std::string& key : declared) {
    if (!Unescaped(key)) continue;
    size_t node = 0;
    for (size_t at = 0; at < key.size();) {
      const std::string c = key.substr(at, CharLen(static_cast<uint8_t>(key[at])));
      at += c.size();
      auto it = trie[node].children.find(c);
      if (it == trie[node].children.end()) {
        trie.push_back(Node{b.NewState(rule), false, {}});
        it = trie[node].children.emplace(c, trie.size() - 1).first;
        b.Literal(trie[node].state, c, trie.back().state);
      }
      node = it->second;
    }
    trie[node].is_name = true;
  }
  for (const Node& n : trie) {
    if (!n.is_name) b.Byte(n.state, '"', end);
    std::vector<std::string> taken;
    for (const auto& [c, child] : n.children) taken.push_back(c);
    for (const auto& seq : UnescapedChars()) OtherChars(b, n.state, free, seq, taken, 0);
  }
  return rule;
}

}  // namespace dq::grammar
