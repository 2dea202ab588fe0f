#include "common/jinja/printf.h"

#include <cctype>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

struct Spec {
  std::string flags;
  int width = -1;
  int precision = -1;
  char type = 's';
};

std::string Pad(std::string body, const Spec& sp, bool numeric) {
  const int n = static_cast<int>(CodePointCount(body));
  if (sp.width <= n) return body;
  const size_t fill = sp.width - n;
  if (sp.flags.find('-') != std::string::npos) return body + std::string(fill, ' ');
  if (numeric && sp.flags.find('0') != std::string::npos) {
    const size_t sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ');
    return body.substr(0, sign) + std::string(fill, '0') + body.substr(sign);
  }
  return std::string(fill, ' ') + body;
}

absl::StatusOr<std::string> FormatNumber(const Value& v, const Spec& sp) {
  if (!v.is_number()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "%", std::string(1, sp.type), " format: a real number is required, not ", v.TypeName()));
  }
  std::string sign = sp.flags.find('+') != std::string::npos
                         ? "+"
                         : (sp.flags.find(' ') != std::string::npos ? " " : "");
  std::string body;
  switch (sp.type) {
    case 'd':
    case 'i':
    case 'u': {
      const int64_t i = v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int();
      body = absl::StrCat(i);
      break;
    }
    case 'x':
    case 'X':
    case 'o': {
      if (v.is_float()) return absl::InvalidArgumentError("%x format: an integer is required");
      const int64_t i = v.as_int();
      const uint64_t mag = i < 0 ? -static_cast<uint64_t>(i) : i;
      body = (i < 0 ? "-" : "") + (sp.type == 'o'   ? absl::StrFormat("%o", mag)
                                   : sp.type == 'x' ? absl::StrFormat("%x", mag)
                                                    : absl::StrFormat("%X", mag));
      break;
    }
    default: {
      const int prec = sp.precision < 0 ? 6 : sp.precision;
      const char f[] = {'%', '.', '*', sp.type, '\0'};
      char buf[512];
      std::snprintf(buf, sizeof(buf), f, prec, v.as_float());
      body = buf;
    }
  }
  if (!body.empty() && body[0] != '-') body = sign + body;
  return body;
}

// Parses the flags, width, precision and type of one conversion at t[*i] (after the % and any
// (key)); leaves *i on the type character.
absl::StatusOr<Spec> ParseSpec(const std::string& t, size_t* i) {
  Spec sp;
  while (*i < t.size() && std::string_view("-+ #0").find(t[*i]) != std::string_view::npos) {
    sp.flags.push_back(t[(*i)++]);
  }
  while (*i < t.size() && std::isdigit(static_cast<unsigned char>(t[*i]))) {
    sp.width = std::max(sp.width, 0) * 10 + (t[(*i)++] - '0');
  }
  if (*i < t.size() && t[*i] == '.') {
    ++*i, sp.precision = 0;
    while (*i < t.size() && std::isdigit(static_cast<unsigned char>(t[*i]))) {
      sp.precision = sp.precision * 10 + (t[(*i)++] - '0');
    }
  }
  if (*i >= t.size()) return absl::InvalidArgumentError("incomplete format");
  sp.type = t[*i];
  return sp;
}

// Appends one converted argument.
absl::Status Convert(const Value& arg, const Spec& sp, StrBuilder* out) {
  if (sp.type == 's' || sp.type == 'r' || sp.type == 'a') {
    Str s = sp.type == 's' ? ToStr(arg) : Repr(arg);
    if (sp.precision >= 0) {
      const std::vector<size_t> offs = CodePointOffsets(s.text);
      if (static_cast<size_t>(sp.precision) + 1 < offs.size()) {
        StrBuilder cut;
        cut.AppendSlice(s, 0, offs[sp.precision]);
        s = cut.Take();
      }
    }
    const std::string padded = Pad(s.text, sp, false);
    if (padded.size() == s.text.size()) {
      out->Append(s);
    } else {
      out->AppendMarked(padded, HasUser(s));
    }
    return absl::OkStatus();
  }
  if (std::string_view("diuxXoeEfFgG").find(sp.type) == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported format character '", std::string(1, sp.type), "'"));
  }
  absl::StatusOr<std::string> num = FormatNumber(arg, sp);
  if (!num.ok()) return num.status();
  out->Append(Pad(*num, sp, true));
  return absl::OkStatus();
}

// The value a %(key)s names, looked up at t[*i] == '('; leaves *i after the ')'.
absl::StatusOr<Value> KeyedArg(const std::string& t, size_t* i, const Value* mapping) {
  const size_t close = t.find(')', *i);
  if (close == std::string::npos) return absl::InvalidArgumentError("incomplete format key");
  if (mapping == nullptr || !mapping->is_mapping()) {
    return absl::InvalidArgumentError("format requires a mapping");
  }
  const Value* v = mapping->dict().Find(std::string_view(t).substr(*i + 1, close - *i - 1));
  if (v == nullptr) return absl::InvalidArgumentError("format key not found");
  *i = close + 1;
  return *v;
}

}  // namespace

absl::StatusOr<Str> PercentFormat(const Str& fmt, const Value& args) {
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.list();
  } else {
    positional.push_back(args);
    if (!args.is_string() && (args.is_mapping() || args.is_list())) mapping = &args;
  }
  size_t next_arg = 0, start = 0;
  StrBuilder out;
  const std::string& t = fmt.text;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '%') continue;
    out.AppendSlice(fmt, start, i);
    if (++i >= t.size()) return absl::InvalidArgumentError("incomplete format");
    std::optional<Value> keyed;
    if (t[i] == '(') {
      absl::StatusOr<Value> v = KeyedArg(t, &i, mapping);
      if (!v.ok()) return v.status();
      keyed = *std::move(v);
    }
    absl::StatusOr<Spec> sp = ParseSpec(t, &i);
    if (!sp.ok()) return sp.status();
    start = i + 1;
    if (sp->type == '%') {
      out.Append("%");
      continue;
    }
    if (!keyed && next_arg >= positional.size()) {
      return absl::InvalidArgumentError("not enough arguments for format string");
    }
    const Value& arg = keyed ? *keyed : positional[next_arg++];
    if (absl::Status st = Convert(arg, *sp, &out); !st.ok()) return st;
  }
  out.AppendSlice(fmt, start, t.size());
  // Python: every positional argument must be used, unless the argument is a mapping.
  if (mapping == nullptr && (args.is_tuple() ? next_arg < positional.size() : next_arg == 0)) {
    return absl::InvalidArgumentError("not all arguments converted during string formatting");
  }
  return out.Take();
}

}  // namespace dq::jinja
