#include "common/jinja/lexer.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

// jinja2 normalises \r\n and \r to \n and drops one trailing newline before lexing.
std::string NormalizeSource(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Python-whitespace run at s[pos].
size_t SpaceRun(std::string_view s, size_t pos) {
  size_t i = pos;
  while (i < s.size()) {
    size_t j = i;
    if (!IsPySpace(DecodeUtf8(s, &j))) break;
    i = j;
  }
  return i - pos;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& opts) : src_(std::move(src)), opts_(opts) {}
  absl::StatusOr<std::vector<Token>> Run();

 private:
  enum class Tag { kVar, kBlock, kComment };
  absl::Status Error(size_t pos, std::string_view msg) const;
  void Position(size_t pos, int* line, int* col) const;
  void Emit(Token::Type type, std::string text, size_t pos);
  void EmitData(std::string text, size_t pos);
  std::string ApplyLeftStrip(std::string text, char sign, Tag tag) const;
  // Consumes a tag's closing delimiter at pos_ if there is one there.
  bool MatchEnd(Tag tag);
  absl::Status LexComment();
  absl::Status LexTagBody(Tag tag);
  absl::Status LexExprToken();
  absl::Status LexString();
  bool TryRaw(size_t tag_pos);

  std::string src_;
  LexOptions opts_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  int depth_ = 0;  // open brackets: a closing delimiter inside them is an operator
  std::vector<Token> out_;
  struct Cursor {
    size_t pos = 0;
    int line = 1, col = 1;
  };
  mutable Cursor cursor_;
};

void Lexer::Position(size_t pos, int* line, int* col) const {
  // Tokens come in source order, so continue from the last position asked for.
  if (pos < cursor_.pos) cursor_ = Cursor{};
  for (; cursor_.pos < pos && cursor_.pos < src_.size(); ++cursor_.pos) {
    if (src_[cursor_.pos] == '\n') {
      ++cursor_.line, cursor_.col = 1;
    } else {
      ++cursor_.col;
    }
  }
  *line = cursor_.line, *col = cursor_.col;
}

absl::Status Lexer::Error(size_t pos, std::string_view msg) const {
  int line, col;
  Position(pos, &line, &col);
  return absl::InvalidArgumentError(
      absl::StrCat("template:", line, ":", col, ": ", std::string(msg)));
}

void Lexer::Emit(Token::Type type, std::string text, size_t pos) {
  Token t{type, std::move(text)};
  Position(pos, &t.line, &t.col);
  out_.push_back(std::move(t));
}

void Lexer::EmitData(std::string text, size_t pos) {
  if (!text.empty()) Emit(Token::Type::kData, std::move(text), pos);
}

std::string Lexer::ApplyLeftStrip(std::string text, char sign, Tag tag) const {
  if (sign == '-') {
    text.resize(StripRange(text, "", false, true, true).second);
  } else if (sign != '+' && opts_.lstrip_blocks && tag != Tag::kVar) {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
        SpaceRun(text, l_pos) == text.size() - l_pos) {
      text.resize(l_pos);
    }
  }
  return text;
}

bool Lexer::MatchEnd(Tag tag) {
  const std::string_view s(src_);
  const std::string_view close = tag == Tag::kVar ? "}}" : (tag == Tag::kBlock ? "%}" : "#}");
  size_t end;
  if (s.substr(pos_, 1) == "-" && s.substr(pos_ + 1, 2) == close) {
    end = pos_ + 3;
    end += SpaceRun(s, end);
  } else if (tag != Tag::kVar && s.substr(pos_, 1) == "+" && s.substr(pos_ + 1, 2) == close) {
    end = pos_ + 3;
  } else if (s.substr(pos_, 2) == close) {
    end = pos_ + 2;
    if (tag != Tag::kVar && opts_.trim_blocks && end < s.size() && s[end] == '\n') ++end;
  } else {
    return false;
  }
  line_starting_ = s[end - 1] == '\n';
  pos_ = end;
  return true;
}

absl::Status Lexer::LexComment() {
  const size_t start = pos_;
  while (pos_ < src_.size()) {
    const size_t hash = src_.find("#}", pos_);
    if (hash == std::string::npos) break;
    pos_ = hash > start && (src_[hash - 1] == '-' || src_[hash - 1] == '+') ? hash - 1 : hash;
    if (MatchEnd(Tag::kComment)) return absl::OkStatus();
    pos_ = hash + 2;
  }
  return Error(start, "Missing end of comment tag");
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ < src_.size()) {
    size_t p = pos_;
    size_t found = std::string::npos;
    while ((p = src_.find('{', p)) != std::string::npos && p + 1 < src_.size()) {
      const char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') {
        found = p;
        break;
      }
      ++p;
    }
    if (found == std::string::npos) {
      EmitData(src_.substr(pos_), pos_);
      break;
    }
    const char kind = src_[found + 1];
    const Tag tag = kind == '{' ? Tag::kVar : (kind == '%' ? Tag::kBlock : Tag::kComment);
    const char sign = found + 2 < src_.size() ? src_[found + 2] : '\0';
    EmitData(ApplyLeftStrip(src_.substr(pos_, found - pos_), sign, tag), pos_);
    if (tag == Tag::kBlock && TryRaw(found)) continue;
    pos_ = found + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    if (tag == Tag::kComment) {
      absl::Status st = LexComment();
      if (!st.ok()) return st;
      continue;
    }
    Emit(tag == Tag::kVar ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", found);
    absl::Status st = LexTagBody(tag);
    if (!st.ok()) return st;
  }
  Emit(Token::Type::kEof, "", src_.size());
  return std::move(out_);
}

absl::Status Lexer::LexTagBody(Tag tag) {
  const size_t start = pos_;
  depth_ = 0;
  while (true) {
    pos_ += SpaceRun(src_, pos_);
    if (pos_ >= src_.size()) {
      return Error(start, tag == Tag::kVar ? "unexpected end of template, expected '}}'"
                                           : "unexpected end of template, expected '%}'");
    }
    const size_t at = pos_;
    if (depth_ == 0 && MatchEnd(tag)) {
      Emit(tag == Tag::kVar ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", at);
      return absl::OkStatus();
    }
    absl::Status st = LexExprToken();
    if (!st.ok()) return st;
  }
}

absl::Status Lexer::LexExprToken() {
  const std::string_view s(src_);
  const size_t at = pos_;
  const char c = s[at];
  if (std::isdigit(static_cast<unsigned char>(c))) {
    size_t i = at;
    auto digits = [&] {
      while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) ||
                              (s[i] == '_' && i + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[i + 1])))))
        ++i;
    };
    digits();
    bool is_float = false;
    if (i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      ++i, digits(), is_float = true;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      size_t j = i + 1;
      if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
      if (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
        i = j, digits(), is_float = true;
      }
    }
    std::string num;
    for (char ch : s.substr(at, i - at)) {
      if (ch != '_') num.push_back(ch);
    }
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, num, at);
    pos_ = i;
    return absl::OkStatus();
  }
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    size_t i = at;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    Emit(Token::Type::kName, std::string(s.substr(at, i - at)), at);
    pos_ = i;
    return absl::OkStatus();
  }
  if (c == '\'' || c == '"') return LexString();
  static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
  for (std::string_view op : kTwo) {
    if (s.substr(at, 2) == op) {
      Emit(Token::Type::kOp, std::string(op), at);
      pos_ += 2;
      return absl::OkStatus();
    }
  }
  if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
    if (c == '(' || c == '[' || c == '{') ++depth_;
    if ((c == ')' || c == ']' || c == '}') && depth_ > 0) --depth_;
    Emit(Token::Type::kOp, std::string(1, c), at);
    ++pos_;
    return absl::OkStatus();
  }
  return Error(at, absl::StrCat("unexpected char '", std::string(1, c), "'"));
}

// The single-character escapes of Python string literals; 0 when `e` is not one.
char SimpleEscape(char e) {
  switch (e) {
    case '\\':
      return '\\';
    case '\'':
      return '\'';
    case '"':
      return '"';
    case 'a':
      return '\a';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'v':
      return '\v';
    default:
      return 0;
  }
}

// Python's unicode-escape decoding, which jinja2 applies to string literals.
bool Unescape(std::string_view body, std::string* out) {
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out->push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    auto hex = [&](int n) -> bool {
      char32_t cp = 0;
      for (int k = 1; k <= n; ++k) {
        if (i + k >= body.size() || !std::isxdigit(static_cast<unsigned char>(body[i + k]))) {
          return false;
        }
        cp = cp * 16 + std::stoi(std::string(1, body[i + k]), nullptr, 16);
      }
      AppendUtf8(out, cp);
      i += n;
      return true;
    };
    if (e == '\n') continue;  // a backslash-newline joins the lines
    if (const char c = SimpleEscape(e)) {
      out->push_back(c);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      if (!hex(e == 'x' ? 2 : e == 'u' ? 4 : 8)) return false;
    } else if (e >= '0' && e <= '7') {
      int v = e - '0', n = 1;
      while (n < 3 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7') {
        v = v * 8 + (body[++i] - '0'), ++n;
      }
      AppendUtf8(out, static_cast<char32_t>(v));
    } else {
      out->push_back('\\'), out->push_back(e);  // unknown escapes stay as written
    }
  }
  return true;
}

absl::Status Lexer::LexString() {
  const size_t at = pos_;
  const char q = src_[at];
  size_t i = at + 1;
  while (i < src_.size() && src_[i] != q) {
    if (src_[i] == '\\') ++i;
    ++i;
  }
  if (i >= src_.size()) return Error(at, "unexpected end of string");
  std::string value;
  if (!Unescape(std::string_view(src_).substr(at + 1, i - at - 1), &value)) {
    return Error(at, "invalid escape in string literal");
  }
  Emit(Token::Type::kString, std::move(value), at);
  pos_ = i + 1;
  return absl::OkStatus();
}

// `{% raw %}...{% endraw %}`: the body is data, not lexed.
bool Lexer::TryRaw(size_t tag_pos) {
  size_t i = tag_pos + 2;
  if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
  i += SpaceRun(src_, i);
  if (src_.compare(i, 3, "raw") != 0) return false;
  i += 3;
  i += SpaceRun(src_, i);
  pos_ = i;
  if (!MatchEnd(Tag::kBlock)) return false;
  size_t search = pos_;
  while (true) {
    const size_t open = src_.find("{%", search);
    if (open == std::string::npos) return false;
    size_t j = open + 2;
    const char sign = j < src_.size() ? src_[j] : '\0';
    if (sign == '-' || sign == '+') ++j;
    j += SpaceRun(src_, j);
    if (src_.compare(j, 6, "endraw") == 0) {
      j += 6;
      j += SpaceRun(src_, j);
      const std::string body = src_.substr(pos_, open - pos_);
      const size_t body_pos = pos_;
      pos_ = j;
      if (MatchEnd(Tag::kBlock)) {
        EmitData(ApplyLeftStrip(body, sign, Tag::kBlock), body_pos);
        return true;
      }
    }
    search = open + 2;
  }
}

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexOptions& opts) {
  Lexer lexer(NormalizeSource(source), opts);
  return lexer.Run();
}

}  // namespace dq::jinja
