#include "common/jinja/strings.h"

#include <cctype>

#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

Str SliceOf(const Str& s, size_t b, size_t e) {
  StrBuilder out;
  out.AppendSlice(s, b, e);
  return out.Take();
}

bool SpaceAt(std::string_view s, size_t i, size_t* next) {
  *next = i;
  return IsPySpace(DecodeUtf8(s, next));
}

std::vector<Str> SplitWhitespace(const Str& s, int64_t maxsplit) {
  std::vector<Str> out;
  const std::string& t = s.text;
  size_t i = 0, next;
  while (i < t.size()) {
    while (i < t.size() && SpaceAt(t, i, &next)) i = next;
    if (i >= t.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      // The remainder keeps its trailing whitespace stripped, as Python does.
      const size_t end = StripRange(std::string_view(t).substr(i), "", false, true, true).second;
      out.push_back(SliceOf(s, i, i + end));
      break;
    }
    const size_t start = i;
    while (i < t.size() && !SpaceAt(t, i, &next)) i = next;
    out.push_back(SliceOf(s, start, i));
  }
  return out;
}

}  // namespace

Str StripStr(const Str& s, std::string_view chars, bool left, bool right, bool whitespace) {
  const auto [b, e] = StripRange(s.text, chars, left, right, whitespace);
  return SliceOf(s, b, e);
}

std::vector<Str> SplitStr(const Str& s, std::string_view sep, int64_t maxsplit, bool whitespace,
                          bool from_right) {
  if (whitespace && !from_right) return SplitWhitespace(s, maxsplit);
  if (whitespace) {  // rsplit() without sep: split all, then rejoin the leftmost extras
    std::vector<Str> all = SplitWhitespace(s, -1);
    if (maxsplit < 0 || static_cast<int64_t>(all.size()) <= maxsplit + 1) return all;
    const size_t keep = all.size() - maxsplit;
    // Find where piece `keep` starts to cut the head from the original text.
    size_t pos = 0, next;
    size_t seen = 0;
    const std::string& t = s.text;
    size_t head_end = 0;
    while (pos < t.size() && seen < keep) {
      while (pos < t.size() && SpaceAt(t, pos, &next)) pos = next;
      while (pos < t.size() && !SpaceAt(t, pos, &next)) pos = next;
      head_end = pos;
      ++seen;
    }
    const size_t head_start = StripRange(t, "", true, false, true).first;
    std::vector<Str> out{SliceOf(s, head_start, head_end)};
    out.insert(out.end(), all.begin() + keep, all.end());
    return out;
  }
  std::vector<size_t> cuts;  // byte offsets of separator matches
  const std::string& t = s.text;
  if (!from_right) {
    for (size_t p = t.find(sep); p != std::string::npos; p = t.find(sep, p + sep.size())) {
      if (maxsplit >= 0 && static_cast<int64_t>(cuts.size()) >= maxsplit) break;
      cuts.push_back(p);
    }
  } else {
    size_t end = t.size();
    while (end >= sep.size()) {
      if (maxsplit >= 0 && static_cast<int64_t>(cuts.size()) >= maxsplit) break;
      const size_t p = t.rfind(sep, end - sep.size());
      if (p == std::string::npos) break;
      cuts.insert(cuts.begin(), p);
      end = p;
    }
  }
  std::vector<Str> out;
  size_t start = 0;
  for (size_t c : cuts) {
    out.push_back(SliceOf(s, start, c));
    start = c + sep.size();
  }
  out.push_back(SliceOf(s, start, t.size()));
  return out;
}

Str ReplaceStr(const Str& s, std::string_view old, const Str& replacement, int64_t count) {
  StrBuilder out;
  const std::string& t = s.text;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts the replacement around every code point
    const std::vector<size_t> offs = CodePointOffsets(t);
    for (size_t i = 0; i < offs.size(); ++i) {
      if (count < 0 || done < count) out.Append(replacement), ++done;
      if (i + 1 < offs.size()) out.AppendSlice(s, offs[i], offs[i + 1]);
    }
    return out.Take();
  }
  size_t start = 0;
  for (size_t p = t.find(old); p != std::string::npos && (count < 0 || done < count);
       p = t.find(old, start), ++done) {
    out.AppendSlice(s, start, p);
    out.Append(replacement);
    start = p + old.size();
  }
  out.AppendSlice(s, start, t.size());
  return out.Take();
}

std::vector<Str> SplitLines(const Str& s, bool keepends) {
  std::vector<Str> out;
  const std::string& t = s.text;
  size_t start = 0, i = 0;
  while (i < t.size()) {
    size_t next = i;
    const char32_t c = DecodeUtf8(t, &next);
    if (!IsPyLineBreak(c)) {
      i = next;
      continue;
    }
    if (c == '\r' && next < t.size() && t[next] == '\n') ++next;
    out.push_back(SliceOf(s, start, keepends ? next : i));
    start = i = next;
  }
  if (start < t.size()) out.push_back(SliceOf(s, start, t.size()));
  return out;
}

namespace {

// What one code point becomes under `mode`; `prev_cased`/`next_cased` are its neighbours'
// casedness (for title case and the Greek final sigma).
std::string MapCodePoint(char32_t c, std::string_view mode, size_t index, bool prev_cased,
                         bool next_cased) {
  bool upper;
  if (mode == "upper") {
    upper = true;
  } else if (mode == "lower") {
    upper = false;
  } else if (mode == "swapcase") {
    upper = ToUpperCp(c) == c;
  } else if (mode == "capitalize") {
    upper = index == 0;
  } else {  // title
    upper = !prev_cased;
  }
  const bool title = upper && (mode == "capitalize" || mode == "title");
  std::string out;
  if (c == 0xDF && upper) {
    out = title ? "Ss" : "SS";  // Python's full mapping of the sharp s
  } else if (c == 0x3A3 && !upper && prev_cased && !next_cased) {
    AppendUtf8(&out, 0x3C2);  // final sigma
  } else {
    AppendUtf8(&out, upper ? (title ? ToTitleCp(c) : ToUpperCp(c)) : ToLowerCp(c));
  }
  return out;
}

}  // namespace

Str CaseMap(const Str& s, std::string_view mode) {
  const std::string& t = s.text;
  const std::vector<size_t> offs = CodePointOffsets(t);
  std::vector<char32_t> cps;
  for (size_t k = 0; k + 1 < offs.size(); ++k) {
    size_t i = offs[k];
    cps.push_back(DecodeUtf8(t, &i));
  }
  StrBuilder out;
  bool prev_cased = false;
  size_t range = 0;  // the first user range that may contain the current byte
  for (size_t k = 0; k < cps.size(); ++k) {
    const bool next_cased = k + 1 < cps.size() && IsCasedCp(cps[k + 1]);
    const std::string mapped = MapCodePoint(cps[k], mode, k, prev_cased, next_cased);
    const std::string_view orig = std::string_view(t).substr(offs[k], offs[k + 1] - offs[k]);
    if (mapped == orig) {
      out.AppendSlice(s, offs[k], offs[k + 1]);
    } else {
      // A mapped code point is user content when the one it replaces was.
      while (range < s.user.size() && s.user[range].end <= offs[k]) ++range;
      const bool user = range < s.user.size() && s.user[range].begin <= offs[k];
      out.AppendMarked(mapped, user);
    }
    prev_cased = IsCasedCp(cps[k]);
  }
  return out.Take();
}

Str JinjaTitle(const Str& s) {
  // jinja2 splits at runs of whitespace and -([{< and capitalises each piece.
  Str out = s;
  std::string& t = out.text;
  bool word_start = true;
  for (size_t i = 0; i < t.size();) {
    size_t next = i;
    const char32_t c = DecodeUtf8(t, &next);
    if (IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      word_start = true;
      i = next;
      continue;
    }
    const char32_t r = word_start ? ToTitleCp(c) : ToLowerCp(c);
    word_start = false;
    if (r != c) {
      std::string enc;
      AppendUtf8(&enc, r);
      if (enc.size() == next - i) t.replace(i, enc.size(), enc);
    }
    i = next;
  }
  return out;
}

Str HtmlEscape(const Str& s) {
  StrBuilder out;
  size_t start = 0;
  for (size_t i = 0; i < s.text.size(); ++i) {
    const char* rep = nullptr;
    switch (s.text[i]) {
      case '&':
        rep = "&amp;";
        break;
      case '<':
        rep = "&lt;";
        break;
      case '>':
        rep = "&gt;";
        break;
      case '"':
        rep = "&#34;";
        break;
      case '\'':
        rep = "&#39;";
        break;
      default:
        continue;
    }
    out.AppendSlice(s, start, i);
    out.Append(rep);
    start = i + 1;
  }
  out.AppendSlice(s, start, s.text.size());
  return out.Take();
}

bool CharClassTest(std::string_view s, std::string_view mode) {
  if (s.empty()) return false;
  bool any_cased = false;
  for (unsigned char c : s) {
    if (mode == "isdigit" && !std::isdigit(c)) return false;
    if (mode == "isalpha" && !std::isalpha(c) && c < 0x80) return false;
    if (mode == "isalnum" && !std::isalnum(c) && c < 0x80) return false;
    if (mode == "isspace" && !std::isspace(c)) return false;
    if (mode == "isupper" && std::islower(c)) return false;
    if (mode == "islower" && std::isupper(c)) return false;
    any_cased |= std::isalpha(c) != 0;
  }
  return (mode == "isupper" || mode == "islower") ? any_cased : true;
}

}  // namespace dq::jinja
