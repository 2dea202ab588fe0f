#include "common/tokenizer/utf8.h"

#include <array>

namespace dq::tok_internal {
namespace {

enum class SeqKind { kValid, kInvalid, kIncomplete };

struct SeqResult {
  SeqKind kind;
  size_t len;  // kValid: sequence length; kInvalid: maximal subpart; kIncomplete: bytes left.
};

// Classifies the sequence starting at s[i] (s[i] >= 0x80).
SeqResult CheckSequence(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // Allowed range of the second byte.
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {SeqKind::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return {SeqKind::kIncomplete, k};
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return {SeqKind::kInvalid, k};
  }
  return {SeqKind::kValid, need};
}

struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 324> to_byte{};  // Image of the mapping is below U+0144.

  ByteTables() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_unicode[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_unicode[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Bytes() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

int DecodeUtf8(std::string_view s, size_t i, char32_t* cp) {
  if (i >= s.size()) return 0;
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  const SeqResult r = CheckSequence(s, i);
  if (r.kind != SeqKind::kValid) return 0;
  char32_t v = r.len == 2 ? (b0 & 0x1F) : r.len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < r.len; ++k) v = (v << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  *cp = v;
  return static_cast<int>(r.len);
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const SeqResult r = CheckSequence(s, i);
    if (r.kind != SeqKind::kValid) return false;
    i += r.len;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string* out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0, run = 0;  // [run, i) is valid and not yet copied.
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const SeqResult r = CheckSequence(bytes, i);
    if (r.kind == SeqKind::kValid) {
      i += r.len;
      continue;
    }
    out->append(bytes.substr(run, i - run));
    out->append(kReplacement);
    i += r.len;
    run = i;
  }
  out->append(bytes.substr(run));
}

size_t IncompleteUtf8TailLen(std::string_view bytes) {
  // An incomplete sequence is at most 3 bytes long; find its lead byte.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(bytes[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // Continuation byte: keep looking for the lead.
    if (b < 0x80) return 0;
    const SeqResult r = CheckSequence(bytes, n - back);
    return r.kind == SeqKind::kIncomplete ? back : 0;
  }
  return 0;
}

char32_t ByteToUnicode(uint8_t byte) { return Bytes().to_unicode[byte]; }

int UnicodeToByte(char32_t cp) {
  const ByteTables& t = Bytes();
  return cp < t.to_byte.size() ? t.to_byte[cp] : -1;
}

void AppendByteLevel(std::string_view bytes, std::string* out) {
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), out);
}

std::string ByteLevelDecodeToken(std::string_view token) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    char32_t cp = 0;
    const int len = DecodeUtf8(token, i, &cp);
    const int byte = len > 0 ? UnicodeToByte(cp) : -1;
    if (byte < 0) return std::string(token);
    bytes.push_back(static_cast<char>(byte));
    i += static_cast<size_t>(len);
  }
  return bytes;
}

}  // namespace dq::tok_internal
