// Expressions and the value operations behind them, with Python's (and jinja2's sandbox's)
// semantics: attribute vs item lookup order, negative indices, slices, arithmetic, `in`.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/jinja/interpreter.h"
#include "common/jinja/printf.h"
#include "common/jinja/strings.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

constexpr size_t kMaxRepeatBytes = 1 << 26;  // "x" * n and [..] * n, against memory blowups

absl::Status TypeError(std::string msg) { return absl::InvalidArgumentError(std::move(msg)); }

Value NoAttr(const Value& obj, std::string_view name) {
  return Value::Undefined(absl::StrCat("'", obj.TypeName(), " object' has no attribute '",
                                       std::string(std::string(name)), "'"));
}

// Python's index normalisation for obj[i]: -1 is the last element; nullopt when out of range.
std::optional<size_t> NormIndex(int64_t i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  if (i < 0 || i >= static_cast<int64_t>(n)) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  const std::string& n = v.undefined_name();
  return absl::InvalidArgumentError(n.empty() ? std::string("value is undefined") : n);
}

absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!name.empty() && name[0] == '_') return NoAttr(obj, name);  // the sandbox hides these
  if (obj.is_namespace()) {
    const Value* v = obj.namespace_data().Find(name);
    return v ? *v : NoAttr(obj, name);
  }
  if (std::optional<Value> m = GetMethod(obj, name)) return *m;
  if (obj.is_dict()) {
    const Value* v = obj.dict().Find(name);
    return v ? *v : NoAttr(obj, name);
  }
  return NoAttr(obj, name);
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_list()) {
      if (auto i = NormIndex(key.as_int(), obj.list().size())) return obj.list()[*i];
    } else {
      const std::vector<size_t> offs = CodePointOffsets(obj.str());
      if (auto i = NormIndex(key.as_int(), offs.size() - 1)) {
        StrBuilder b;
        b.AppendSlice(obj.str_data(), offs[*i], offs[*i + 1]);
        return Value::String(b.Take());
      }
    }
  }
  if (key.is_string()) return GetAttr(obj, key.str());  // jinja2 falls back to getattr
  return Value::Undefined(
      absl::StrCat("'", obj.TypeName(), " object' has no item ", ToStr(key).text));
}

absl::StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                            const Value& step_v, bool folded) {
  if (!obj.is_list() && !obj.is_string()) {
    // jinja2 compiles a slice to Python's own obj[a:b] (not environment.getitem), so slicing
    // a non-sequence raises; except in a {{ }} of constants, which jinja2 evaluates at compile
    // time through getitem, where the failure becomes undefined.
    if (obj.is_undefined()) return UndefinedError(obj);
    if (folded) return Value::Undefined("unsliceable value");
    if (obj.is_dict()) return TypeError("unhashable type: 'slice'");
    return TypeError(absl::StrCat("'", obj.TypeName(), "' object is not subscriptable"));
  }
  auto as_opt = [](const Value& v) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.is_int() || v.is_bool()) return v.as_int();
    return TypeError("slice indices must be integers or None");
  };
  absl::StatusOr<std::optional<int64_t>> b = as_opt(start), e = as_opt(stop), s = as_opt(step_v);
  if (!b.ok()) return b.status();
  if (!e.ok()) return e.status();
  if (!s.ok()) return s.status();
  const int64_t step = s->value_or(1);
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  std::vector<size_t> offs;
  const int64_t n = obj.is_list()
                        ? static_cast<int64_t>(obj.list().size())
                        : static_cast<int64_t>((offs = CodePointOffsets(obj.str())).size() - 1);
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t lo = adjust(*b, step > 0 ? 0 : n - 1), hi = adjust(*e, step > 0 ? n : -1);
  if (obj.is_list()) {
    std::vector<Value> out;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(obj.list()[i]);
    return obj.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  StrBuilder out;
  if (step == 1) {
    if (lo < hi) out.AppendSlice(obj.str_data(), offs[lo], offs[hi]);
  } else {
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
      out.AppendSlice(obj.str_data(), offs[i], offs[i + 1]);
    }
  }
  return Value::String(out.Take());
}

namespace {

absl::StatusOr<Value> IntOp(std::string_view op, int64_t x, int64_t y) {
  int64_t r = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(x, y, &r);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(x, y, &r);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(x, y, &r);
  } else if (op == "/") {
    if (y == 0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // floor, as Python does
    r = op == "//" ? q : m;
  } else if (op == "**") {
    if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
    r = 1;
    for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
  }
  if (overflow) return absl::OutOfRangeError("integer overflow");
  return Value::Int(r);
}

absl::StatusOr<Value> FloatOp(std::string_view op, double x, double y) {
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0) return absl::InvalidArgumentError("float division by zero");
  if (op == "/") return Value::Float(x / y);
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  if (m == 0) m = std::copysign(0.0, y);  // Python's zero remainder takes the divisor's sign
  if (op == "%") return Value::Float(m);
  return Value::Float(std::floor(x / y));  // //
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  n = std::max<int64_t>(n, 0);
  if (seq.is_string()) {
    if (seq.str().size() * n > kMaxRepeatBytes) return absl::ResourceExhaustedError("too big");
    StrBuilder b;
    for (int64_t i = 0; i < n; ++i) b.Append(seq.str_data());
    return Value::String(b.Take());
  }
  if (seq.list().size() * n > kMaxRepeatBytes / 16) return absl::ResourceExhaustedError("too big");
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::List(std::move(out));
}

}  // namespace

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return FloatOp(op, a.as_float(), b.as_float());
    return IntOp(op, a.as_int(), b.as_int());
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    // Markup + str escapes the plain side and stays Markup, as markupsafe does.
    const bool markup = a.is_markup() || b.is_markup();
    StrBuilder s;
    s.Append(markup && !a.is_markup() ? HtmlEscape(a.str_data()) : a.str_data());
    s.Append(markup && !b.is_markup() ? HtmlEscape(b.str_data()) : b.str_data());
    return markup ? Value::Markup(s.Take()) : Value::String(s.Take());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    std::vector<Value> out = a.list();
    out.insert(out.end(), b.list().begin(), b.list().end());
    return a.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  if (op == "%" && a.is_string()) {
    absl::StatusOr<Str> s = PercentFormat(a.str_data(), b);
    if (!s.ok()) return s.status();
    return Value::String(*std::move(s));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
    return Repeat(a, b.as_int());
  }
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) {
    return Repeat(b, a.as_int());
  }
  return TypeError(absl::StrCat("unsupported operand type(s) for ", std::string(std::string(op)),
                                ": '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<bool> Contains(const Value& c, const Value& item) {
  if (c.is_string()) {
    if (!item.is_string()) {
      if (item.is_undefined()) return UndefinedError(item);
      return TypeError(
          absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
    }
    return c.str().find(item.str()) != std::string::npos;
  }
  if (c.is_list()) {
    for (const Value& v : c.list()) {
      if (Equal(v, item)) return true;
    }
    return false;
  }
  if (c.is_dict()) {
    if (!Hashable(item)) return UnhashableError(item);
    return c.dict().Find(item) != nullptr;
  }
  if (c.is_undefined()) return false;
  return TypeError(absl::StrCat("argument of type '", c.TypeName(), "' is not iterable"));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::vector<size_t> offs = CodePointOffsets(v.str());
      for (size_t i = 0; i + 1 < offs.size(); ++i) {
        StrBuilder b;
        b.AppendSlice(v.str_data(), offs[i], offs[i + 1]);
        chars.push_back(Value::String(b.Take()));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointCount(v.str()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<std::vector<std::optional<Value>>> BindArgs(
    std::string_view fn, const CallArgs& args, std::initializer_list<std::string_view> names) {
  std::vector<std::optional<Value>> out(names.size());
  if (args.positional.size() > names.size()) {
    return TypeError(absl::StrCat(std::string(fn), "() takes at most ", names.size(),
                                  " arguments (", args.positional.size(), " given)"));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.kwargs) {
    size_t i = 0;
    for (std::string_view n : names) {
      if (n == k) break;
      ++i;
    }
    if (i == names.size()) {
      return TypeError(
          absl::StrCat(std::string(fn), "() got an unexpected keyword argument '", k, "'"));
    }
    out[i] = v;
  }
  return out;
}

}  // namespace dq::jinja
