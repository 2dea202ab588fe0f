#include "router/utf8.h"

#include <cstdint>

namespace dq::router {
namespace {

// The outcome of reading one sequence: its length when well-formed, or the length of its
// maximal ill-formed subpart (at least 1) and why.
struct SequenceRead {
  bool ok = false;
  size_t length = 1;
  std::string_view what;
};

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Reads the sequence at s[i]. The allowed range of the second byte depends on the lead byte
// (table 3-7); checking it there is what rejects overlongs, surrogates and > U+10FFFF early,
// so the ill-formed subpart is as short as the standard says.
SequenceRead ReadSequence(std::string_view s, size_t i) {
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  if (lead < 0x80) return {true, 1, {}};
  if (IsContinuation(lead)) return {false, 1, "unexpected continuation byte"};
  if (lead == 0xC0 || lead == 0xC1) return {false, 1, "overlong encoding"};
  if (lead > 0xF4) return {false, 1, "invalid lead byte (code point above U+10FFFF)"};
  size_t need = lead < 0xE0 ? 2 : (lead < 0xF0 ? 3 : 4);
  uint8_t lo = 0x80, hi = 0xBF;
  std::string_view second_problem = "truncated sequence";
  if (lead == 0xE0) lo = 0xA0, second_problem = "overlong encoding";
  if (lead == 0xED) hi = 0x9F, second_problem = "UTF-16 surrogate";
  if (lead == 0xF0) lo = 0x90, second_problem = "overlong encoding";
  if (lead == 0xF4) hi = 0x8F, second_problem = "code point above U+10FFFF";
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return {false, k, "truncated sequence"};
    const uint8_t b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 && (b < lo || b > hi)) {
      return {false, 1, IsContinuation(b) ? second_problem : "truncated sequence"};
    }
    if (!IsContinuation(b)) return {false, k, "truncated sequence"};
  }
  return {true, need, {}};
}

}  // namespace

bool IsValidUtf8(std::string_view s, Utf8Problem* problem) {
  size_t i = 0;
  while (i < s.size()) {
    // Fast path: ASCII runs dominate prompts.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const SequenceRead r = ReadSequence(s, i);
    if (!r.ok) {
      if (problem != nullptr) *problem = {i, r.what};
      return false;
    }
    i += r.length;
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const SequenceRead r = ReadSequence(bytes, i);
    if (r.ok) {
      out.append(bytes.substr(i, r.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    i += r.length;
  }
  return out;
}

size_t CountCodePoints(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += IsContinuation(static_cast<uint8_t>(c)) ? 0 : 1;
  return n;
}

}  // namespace dq::router
