// Normalisation of Jinja chat-template source, used by ChatTemplate::FromTemplateString to
// recognise the templates it implements (see chat_template.h).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <vector>

#include "common/chat_template.h"
#include "common/status.h"

namespace dq {
namespace {

// ---------------------------------------------------------------------------------------------
// Normalisation for matching. Jinja source is split into text and tags; the whitespace rules of
// transformers' environment (trim_blocks, lstrip_blocks, `-` markers, the dropped final newline)
// are applied to the text, and inside tags whitespace, quote style, string escapes and
// `x['name']` (== x.name) are normalised. Two sources with equal forms render alike.

enum class TagType { kText, kVar, kBlock, kComment };

struct Segment {
  TagType type = TagType::kText;
  std::string body;
  bool strip_before = false;  // {%- / {{- / {#-
  bool strip_after = false;   // -%} / -}} / -#}
  bool keep_before = false;   // {%+ : no lstrip_blocks
  bool keep_after = false;    // +%} : no trim_blocks
};

bool IsSpaceOrTab(char c) { return c == ' ' || c == '\t'; }
bool IsJinjaSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// Position just past the string literal starting at `pos` (a quote), or npos if unterminated.
size_t SkipString(std::string_view s, size_t pos) {
  const char quote = s[pos];
  for (size_t i = pos + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == quote) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Parses the tag opening at `start` ("{{", "{%" or "{#"); returns the position after it.
absl::StatusOr<size_t> LexTag(std::string_view src, size_t start, Segment& seg) {
  const char open = src[start + 1];
  seg.type = open == '{' ? TagType::kVar : open == '%' ? TagType::kBlock : TagType::kComment;
  const char close = open == '{' ? '}' : open;
  size_t i = start + 2;
  if (i < src.size() && (src[i] == '-' || src[i] == '+')) {
    (src[i] == '-' ? seg.strip_before : seg.keep_before) = true;
    ++i;
  }
  const size_t body_start = i;
  while (i + 1 < src.size() && !(src[i] == close && src[i + 1] == '}')) {
    if (seg.type != TagType::kComment && (src[i] == '\'' || src[i] == '"')) {
      i = SkipString(src, i);
      if (i == std::string_view::npos) break;
    } else {
      ++i;
    }
  }
  if (i == std::string_view::npos || i + 1 >= src.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unterminated Jinja tag or string starting at byte ", start));
  }
  size_t body_end = i;
  if (body_end > body_start && (src[body_end - 1] == '-' || src[body_end - 1] == '+')) {
    (src[body_end - 1] == '-' ? seg.strip_after : seg.keep_after) = true;
    --body_end;
  }
  seg.body = std::string(src.substr(body_start, body_end - body_start));
  return i + 2;
}

absl::StatusOr<std::vector<Segment>> LexJinja(std::string_view src) {
  std::vector<Segment> segs;
  size_t pos = 0;
  while (pos <= src.size()) {
    size_t start = std::string_view::npos;
    for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, src.find(open, pos));
    Segment text;
    text.body =
        std::string(src.substr(pos, start == std::string_view::npos ? src.npos : start - pos));
    segs.push_back(std::move(text));
    if (start == std::string_view::npos) break;
    Segment tag;
    DQ_ASSIGN_OR_RETURN(pos, LexTag(src, start, tag));
    segs.push_back(std::move(tag));
  }
  return segs;
}

// Applies the whitespace effects of the tags around text segment `j` (Jinja's lexer rules with
// trim_blocks and lstrip_blocks on).
void ApplyWhitespaceRules(std::vector<Segment>& segs, size_t j) {
  std::string& t = segs[j].body;
  bool line_start = j == 0;
  if (j > 0) {
    const Segment& prev = segs[j - 1];
    if (prev.strip_after) {
      size_t n = 0;
      while (n < t.size() && IsJinjaSpace(t[n])) ++n;
      line_start = n > 0 && t[n - 1] == '\n';
      t.erase(0, n);
    } else if (prev.type != TagType::kVar && !prev.keep_after && !t.empty() && t[0] == '\n') {
      t.erase(0, 1);
      line_start = true;
    }
  }
  if (j + 1 >= segs.size()) return;
  const Segment& next = segs[j + 1];
  if (next.strip_before) {
    while (!t.empty() && IsJinjaSpace(t.back())) t.pop_back();
  } else if (next.type != TagType::kVar && !next.keep_before) {
    const size_t nl = t.rfind('\n');
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    if ((nl != std::string::npos || line_start) &&
        std::all_of(t.begin() + from, t.end(), IsSpaceOrTab)) {
      t.resize(from);
    }
  }
}

// Decodes the escapes of a Jinja string literal (quotes included in `lit`).
std::string DecodeString(std::string_view lit) {
  std::string out;
  for (size_t i = 1; i + 1 < lit.size(); ++i) {
    if (lit[i] != '\\' || i + 2 >= lit.size()) {
      out += lit[i];
      continue;
    }
    const char c = lit[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      default:
        out += '\\';
        out += c;
    }
  }
  return out;
}

struct Token {
  enum Kind { kWord, kString, kPunct } kind;
  std::string text;
};

absl::StatusOr<std::vector<Token>> TokenizeTag(std::string_view body) {
  std::vector<Token> toks;
  size_t i = 0;
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  while (i < body.size()) {
    const char c = body[i];
    if (IsJinjaSpace(c)) {
      ++i;
    } else if (c == '\'' || c == '"') {
      const size_t end = SkipString(body, i);
      if (end == std::string_view::npos) return absl::InvalidArgumentError("unterminated string");
      toks.push_back({Token::kString, DecodeString(body.substr(i, end - i))});
      i = end;
    } else if (is_word(c)) {
      size_t end = i;
      while (end < body.size() && is_word(body[end])) ++end;
      toks.push_back({Token::kWord, std::string(body.substr(i, end - i))});
      i = end;
    } else {
      toks.push_back({Token::kPunct, std::string(1, c)});
      ++i;
    }
  }
  return toks;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsKeyword(std::string_view w) {
  static constexpr std::array<std::string_view, 10> kKeywords = {
      "in", "not", "and", "or", "is", "if", "else", "elif", "for", "set"};
  return std::find(kKeywords.begin(), kKeywords.end(), w) != kKeywords.end();
}

absl::StatusOr<std::string> NormalizeTag(std::string_view body) {
  DQ_ASSIGN_OR_RETURN(std::vector<Token> toks, TokenizeTag(body));
  std::string out;
  Token::Kind last = Token::kPunct;
  for (size_t i = 0; i < toks.size(); ++i) {
    const Token& t = toks[i];
    // x['name'] -> x.name, where x is an expression (a name, call or subscript).
    const bool subscript_ok =
        i > 0 && ((toks[i - 1].kind == Token::kWord && !IsKeyword(toks[i - 1].text)) ||
                  toks[i - 1].text == ")" || toks[i - 1].text == "]");
    if (t.text == "[" && t.kind == Token::kPunct && subscript_ok && i + 2 < toks.size() &&
        toks[i + 1].kind == Token::kString && IsIdentifier(toks[i + 1].text) &&
        toks[i + 2].kind == Token::kPunct && toks[i + 2].text == "]") {
      absl::StrAppend(&out, ".", toks[i + 1].text);
      i += 2;
      last = Token::kWord;
      continue;
    }
    if (t.kind == Token::kWord && last == Token::kWord) out += ' ';
    if (t.kind == Token::kString) {
      std::string escaped;
      for (char c : t.text) {
        if (c == '\\' || c == '\'') escaped += '\\';
        escaped += c;
      }
      absl::StrAppend(&out, "'", escaped, "'");
    } else {
      out += t.text;
    }
    last = t.kind;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> NormalizeJinjaForMatching(std::string_view jinja_source) {
  std::string src;
  src.reserve(jinja_source.size());
  for (size_t i = 0; i < jinja_source.size(); ++i) {  // Jinja normalises newlines to \n
    if (jinja_source[i] == '\r') {
      src += '\n';
      if (i + 1 < jinja_source.size() && jinja_source[i + 1] == '\n') ++i;
    } else {
      src += jinja_source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline=False
  DQ_ASSIGN_OR_RETURN(std::vector<Segment> segs, LexJinja(src));
  for (size_t j = 0; j < segs.size(); ++j) {
    if (segs[j].type == TagType::kText) ApplyWhitespaceRules(segs, j);
  }
  std::string out;
  std::string text;
  for (const Segment& seg : segs) {
    if (seg.type == TagType::kText) {
      text += seg.body;
      continue;
    }
    if (seg.type == TagType::kComment) continue;
    if (!text.empty()) absl::StrAppend(&out, "\x01", std::exchange(text, ""), "\x02");
    DQ_ASSIGN_OR_RETURN(std::string body, NormalizeTag(seg.body));
    const bool var = seg.type == TagType::kVar;
    absl::StrAppend(&out, var ? "{{" : "{%", body, var ? "}}" : "%}");
  }
  if (!text.empty()) absl::StrAppend(&out, "\x01", text, "\x02");
  return out;
}

}  // namespace dq
