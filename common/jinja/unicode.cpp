#include "common/jinja/unicode.h"

namespace dq::jinja {

char32_t DecodeUtf8(std::string_view s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  int len = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    ++*i;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07;
  } else {
    ++*i;
    return b0;
  }
  if (*i + len > s.size()) {
    ++*i;
    return b0;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[*i + k]);
    if ((b & 0xC0) != 0x80) {
      ++*i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *i += len;
  return cp;
}

void AppendUtf8(std::string* out, char32_t cp) {
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

std::vector<size_t> CodePointOffsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offs.push_back(i);
    DecodeUtf8(s, &i);
  }
  offs.push_back(s.size());
  return offs;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) DecodeUtf8(s, &i);
  return n;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool IsPyLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

namespace {

// Ranges where upper and lower case alternate: even code point upper, odd lower (or the
// reverse when `odd_upper`).
struct PairRange {
  char32_t lo, hi;
  bool odd_upper;
};
constexpr PairRange kPairs[] = {
    {0x100, 0x12F, false}, {0x132, 0x137, false}, {0x139, 0x148, true},  {0x14A, 0x177, false},
    {0x179, 0x17E, true},  {0x460, 0x481, false}, {0x48A, 0x4BF, false},
};
// Ranges where lower = upper + delta.
struct ShiftRange {
  char32_t upper_lo, upper_hi;
  char32_t delta;
};
constexpr ShiftRange kShifts[] = {
    {'A', 'Z', 32},     {0xC0, 0xD6, 32},     {0xD8, 0xDE, 32},   {0x391, 0x3A1, 32},
    {0x3A3, 0x3A9, 32}, {0x388, 0x38A, 37},   {0x38E, 0x38F, 63}, {0x410, 0x42F, 32},
    {0x400, 0x40F, 80}, {0xFF21, 0xFF3A, 32},
};

}  // namespace

char32_t ToUpperCp(char32_t c) {
  for (const ShiftRange& r : kShifts) {
    if (c >= r.upper_lo + r.delta && c <= r.upper_hi + r.delta) return c - r.delta;
  }
  for (const PairRange& r : kPairs) {
    if (c >= r.lo && c <= r.hi && ((c & 1) != 0) != r.odd_upper) return c - 1;
  }
  switch (c) {
    case 0x1C5:
    case 0x1C6:
      return 0x1C4;
    case 0x1C8:
    case 0x1C9:
      return 0x1C7;
    case 0x1CB:
    case 0x1CC:
      return 0x1CA;
    case 0x1F2:
    case 0x1F3:
      return 0x1F1;
    case 0xFF:
      return 0x178;
    case 0xB5:
      return 0x39C;
    case 0x3C2:
      return 0x3A3;
    case 0x3AC:
      return 0x386;
    case 0x3CC:
      return 0x38C;
    default:
      return c;
  }
}

char32_t ToLowerCp(char32_t c) {
  for (const ShiftRange& r : kShifts) {
    if (c >= r.upper_lo && c <= r.upper_hi) return c + r.delta;
  }
  for (const PairRange& r : kPairs) {
    if (c >= r.lo && c <= r.hi && ((c & 1) != 0) == r.odd_upper) return c + 1;
  }
  switch (c) {
    case 0x1C4:
    case 0x1C5:
      return 0x1C6;
    case 0x1C7:
    case 0x1C8:
      return 0x1C9;
    case 0x1CA:
    case 0x1CB:
      return 0x1CC;
    case 0x1F1:
    case 0x1F2:
      return 0x1F3;
    case 0x178:
      return 0xFF;
    case 0x386:
      return 0x3AC;
    case 0x38C:
      return 0x3CC;
    default:
      return c;
  }
}

char32_t ToTitleCp(char32_t c) {
  switch (c) {  // the Latin digraphs have a separate title case
    case 0x1C4:
    case 0x1C5:
    case 0x1C6:
      return 0x1C5;
    case 0x1C7:
    case 0x1C8:
    case 0x1C9:
      return 0x1C8;
    case 0x1CA:
    case 0x1CB:
    case 0x1CC:
      return 0x1CB;
    case 0x1F1:
    case 0x1F2:
    case 0x1F3:
      return 0x1F2;
    default:
      return ToUpperCp(c);
  }
}

bool IsCasedCp(char32_t c) {
  return ToUpperCp(c) != c || ToLowerCp(c) != c || c == 0xDF || c == 0x131 || c == 0x138 ||
         c == 0x149 || c == 0x17F;
}

namespace {

bool InSet(char32_t c, std::string_view chars, bool whitespace) {
  if (whitespace) return IsPySpace(c);
  for (size_t i = 0; i < chars.size();) {
    if (DecodeUtf8(chars, &i) == c) return true;
  }
  return false;
}

}  // namespace

std::pair<size_t, size_t> StripRange(std::string_view s, std::string_view chars, bool left,
                                     bool right, bool whitespace) {
  const std::vector<size_t> offs = CodePointOffsets(s);
  size_t b = 0, e = offs.size() - 1;  // code point indices
  auto cp_at = [&](size_t k) {
    size_t i = offs[k];
    return DecodeUtf8(s, &i);
  };
  if (left) {
    while (b < e && InSet(cp_at(b), chars, whitespace)) ++b;
  }
  if (right) {
    while (e > b && InSet(cp_at(e - 1), chars, whitespace)) --e;
  }
  return {offs[b], offs[e]};
}

}  // namespace dq::jinja
