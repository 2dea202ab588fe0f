// jinja2's builtin filters (the ones chat templates use) plus transformers' tojson override.
// Sequence filters (sort, map, select, ...) are in filters_seq.cpp.
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/jinja/filters_internal.h"
#include "common/jinja/interpreter.h"
#include "common/jinja/printf.h"
#include "common/jinja/strings.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

Value Arg(const std::vector<std::optional<Value>>& a, size_t i, Value def) {
  return a[i] ? *a[i] : std::move(def);
}

// Python's ints are unbounded; ours are 64-bit, so a larger float is an error, not a wrap.
absl::StatusOr<Value> FloatToInt(double d) {
  if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) {
    return absl::OutOfRangeError("integer out of the 64-bit range");
  }
  return Value::Int(static_cast<int64_t>(d));
}

absl::StatusOr<Value> IntFilter(const Value& v, const Value& def) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return def;
    return FloatToInt(v.as_float());
  }
  if (v.is_string()) {
    std::string s(absl::StripAsciiWhitespace(v.str()));
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    int64_t i;
    if (absl::SimpleAtoi(s, &i)) return Value::Int(i);
    double d;
    if (absl::SimpleAtod(s, &d) && std::isfinite(d)) return FloatToInt(d);
  }
  return def;
}

absl::StatusOr<Value> FloatFilter(const Value& v, const Value& def) {
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::Float(v.as_float());
  if (v.is_string()) {
    double d;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(v.str()), &d)) return Value::Float(d);
  }
  return def;
}

absl::StatusOr<Value> RoundFilter(const Value& v, const std::vector<std::optional<Value>>& a) {
  const Value prec = Arg(a, 0, Value::Int(0));
  const Value method = Arg(a, 1, Value::String("common"));
  if (!v.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("type ", v.TypeName(), " doesn't define __round__ method"));
  }
  const double scale = std::pow(10.0, static_cast<double>(prec.as_int()));
  const double x = v.as_float() * scale;
  double r;
  if (method.is_string() && method.str() == "ceil") {
    r = std::ceil(x);
  } else if (method.is_string() && method.str() == "floor") {
    r = std::floor(x);
  } else if (method.is_string() && method.str() == "common") {
    if (!v.is_float()) return Value::Int(v.as_int());  // round(int, n) stays an int
    r = std::nearbyint(x);  // Python rounds half to even, as nearbyint does by default
  } else {
    return absl::InvalidArgumentError("method must be common, ceil or floor");
  }
  return Value::Float(r / scale);
}

Str IndentFilter(const Str& s, const std::vector<std::optional<Value>>& a) {
  const Value width = Arg(a, 0, Value::Int(4));
  const bool first = a[1] && a[1]->Truthy(), blank = a[2] && a[2]->Truthy();
  const std::string ind =
      width.is_string() ? width.str() : std::string(std::max<int64_t>(width.as_int(), 0), ' ');
  StrBuilder in;
  in.Append(s);
  in.Append("\n");  // jinja2's quirk so that splitlines keeps a trailing empty line
  std::vector<Str> lines = SplitLines(in.Take(), false);
  StrBuilder out;
  if (first) out.Append(ind);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) {
      out.Append("\n");
      if (blank || !lines[i].text.empty()) out.Append(ind);
    }
    out.Append(lines[i]);
  }
  return out.Take();
}

int64_t WordCount(std::string_view s) {
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = DecodeUtf8(s, &i);
    const bool w = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !IsPySpace(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

// Filters on one string-like argument (jinja2 converts with str() first).
std::optional<absl::StatusOr<Value>> StringFilter(std::string_view name, const Value& v,
                                                  CallArgs& args) {
  if (name == "upper" || name == "lower" || name == "capitalize") {
    return Value::String(CaseMap(ToStr(v), name));
  }
  if (name == "title") return Value::String(JinjaTitle(ToStr(v)));
  if (name == "string") return v.is_string() ? v : Value::String(ToStr(v));
  if (name == "safe") return Value::Markup(ToStr(v));
  if (name == "e" || name == "escape" || name == "forceescape") {
    if (v.is_markup() && name != "forceescape") return v;  // already escaped
    return Value::Markup(HtmlEscape(ToStr(v)));
  }
  if (name == "wordcount") return Value::Int(WordCount(ToStr(v).text));
  if (name == "trim") {
    auto a = BindArgs(name, args, {"chars"});
    if (!a.ok()) return a.status();
    const bool ws = !(*a)[0] || (*a)[0]->is_none();
    return Value::String(StripStr(ToStr(v), ws ? "" : ToStr(*(*a)[0]).text, true, true, ws));
  }
  if (name == "replace") {
    auto a = BindArgs(name, args, {"old", "new", "count"});
    if (!a.ok()) return a.status();
    if (!(*a)[0] || !(*a)[1]) return absl::InvalidArgumentError("replace() needs old and new");
    const int64_t count = (*a)[2] && (*a)[2]->Truthy() ? (*a)[2]->as_int() : -1;
    return Value::String(ReplaceStr(ToStr(v), ToStr(*(*a)[0]).text, ToStr(*(*a)[1]), count));
  }
  if (name == "indent") {
    if (v.is_undefined()) return UndefinedError(v);
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported operand type(s) for +=: '", v.TypeName(), "' and 'str'"));
    }
    auto a = BindArgs(name, args, {"width", "first", "blank"});
    if (!a.ok()) return a.status();
    return Value::String(IndentFilter(ToStr(v), *a));
  }
  return std::nullopt;
}

// int, float, abs, round; nullopt for other names.
std::optional<absl::StatusOr<Value>> NumberFilter(std::string_view name, const Value& v,
                                                  CallArgs& args) {
  if (name == "int" || name == "float") {
    if (v.is_undefined()) return UndefinedError(v);  // Undefined.__int__ raises
    auto a = BindArgs(name, args, {"default", "base"});
    if (!a.ok()) return a.status();
    if (name == "int") return IntFilter(v, Arg(*a, 0, Value::Int(0)));
    return FloatFilter(v, Arg(*a, 0, Value::Float(0)));
  }
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
    if (v.is_int() || v.is_bool()) return Value::Int(v.as_int() < 0 ? -v.as_int() : v.as_int());
    return absl::InvalidArgumentError(
        absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
  }
  if (name == "round") {
    auto a = BindArgs(name, args, {"precision", "method"});
    if (!a.ok()) return a.status();
    return RoundFilter(v, *a);
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Value> RunFilter(Interpreter& in, std::string_view name, const Value& v,
                                CallArgs& args) {
  if (auto r = StringFilter(name, v, args)) return *std::move(r);
  if (auto r = internal::SeqFilter(in, name, v, args)) return *std::move(r);
  if (auto r = NumberFilter(name, v, args)) return *std::move(r);
  if (name == "default" || name == "d") {
    auto a = BindArgs(name, args, {"default_value", "boolean"});
    if (!a.ok()) return a.status();
    const bool boolean = (*a)[1] && (*a)[1]->Truthy();
    if (v.is_undefined() || (boolean && !v.Truthy())) return Arg(*a, 0, Value::String(""));
    return v;
  }
  if (name == "length" || name == "count") {
    absl::StatusOr<int64_t> n = Length(v);
    if (!n.ok()) return n.status();
    return Value::Int(*n);
  }
  if (name == "tojson") {
    auto a = BindArgs(name, args, {"ensure_ascii", "indent", "separators", "sort_keys"});
    if (!a.ok()) return a.status();
    absl::StatusOr<Str> s = ToJson(v, Arg(*a, 1, Value::None()), Arg(*a, 2, Value::None()),
                                   (*a)[3] && (*a)[3]->Truthy());
    if (!s.ok()) return s.status();
    return Value::String(*std::move(s));
  }
  if (name == "format") {
    if (!args.positional.empty() && !args.kwargs.empty()) {
      return absl::InvalidArgumentError(
          "can't handle positional and keyword arguments at the same time");
    }
    Value fmt_args;
    if (!args.kwargs.empty()) {
      std::vector<std::pair<Value, Value>> kv;
      for (auto& [k, x] : args.kwargs) kv.emplace_back(Value::String(k), x);
      fmt_args = Value::Dict(std::move(kv));
    } else {
      fmt_args = Value::Tuple(args.positional);
    }
    absl::StatusOr<Str> s = PercentFormat(ToStr(v), fmt_args);
    if (!s.ok()) return s.status();
    return Value::String(*std::move(s));
  }
  if (name == "attr") {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return absl::InvalidArgumentError("attr() takes one name");
    }
    return GetAttr(v, args.positional[0].str());
  }
  return absl::InvalidArgumentError(
      absl::StrCat("No filter named '", std::string(std::string(name)), "'."));
}

}  // namespace dq::jinja
