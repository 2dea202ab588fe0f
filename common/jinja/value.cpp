#include "common/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {

void StrBuilder::AddRange(size_t begin, size_t end) {
  if (begin >= end) return;
  if (!user_.empty() && user_.back().end >= begin) {
    user_.back().end = std::max(user_.back().end, end);
  } else {
    user_.push_back({begin, end});
  }
}

void StrBuilder::Append(const Str& s) {
  const size_t base = text_.size();
  text_.append(s.text);
  for (const TextRange& r : s.user) AddRange(base + r.begin, base + r.end);
}

void StrBuilder::AppendMarked(std::string_view text, bool user) {
  const size_t base = text_.size();
  text_.append(text);
  if (user) AddRange(base, text_.size());
}

void StrBuilder::AppendSlice(const Str& s, size_t begin, size_t end) {
  const size_t base = text_.size();
  text_.append(s.text, begin, end - begin);
  for (const TextRange& r : s.user) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) AddRange(base + b - begin, base + e - begin);
  }
}

Str StrBuilder::Take() {
  Str s{std::move(text_), std::move(user_)};
  text_.clear();
  user_.clear();
  return s;
}

bool HasUser(const Str& s) { return !s.user.empty(); }

const Value* DictData::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void DictData::Set(const Value& key, Value value) {
  for (auto& [k, v] : items) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  if (!name.empty()) v.str_ = std::make_shared<const Str>(Str{std::move(name), {}});
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}
Value Value::String(std::string s) { return String(Str{std::move(s), {}}); }
Value Value::UserString(std::string s) {
  Str str{std::move(s), {}};
  if (!str.text.empty()) str.user.push_back({0, str.text.size()});
  return String(std::move(str));
}
Value Value::String(Str s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::make_shared<const Str>(std::move(s));
  return v;
}
Value Value::Markup(Str s) {
  Value v = String(std::move(s));
  v.b_ = true;
  return v;
}
Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& x : items) v.depth_ = std::max(v.depth_, x.depth_ + 1);
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.b_ = true;
  return v;
}
Value Value::Dict(std::vector<std::pair<Value, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& [k, x] : items) v.depth_ = std::max({v.depth_, k.depth_ + 1, x.depth_ + 1});
  v.dict_ = std::make_shared<DictData>(DictData{std::move(items)});
  return v;
}
Value Value::Namespace(std::vector<std::pair<Value, Value>> items) {
  Value v = Dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Func(std::string name,
                  std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.func_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn)});
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kEmpty;  // immutable, so not global mutable state
  return str_ ? str_->text : kEmpty;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0;
    case Kind::kString:
      return !str_->text.empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

const Value* Value::Get(std::string_view key) const {
  return is_mapping() ? dict_->Find(key) : nullptr;
}

bool Hashable(const Value& v) {
  if (v.is_dict()) return false;
  if (!v.is_list()) return true;
  if (!v.is_tuple()) return false;
  for (const Value& x : v.list()) {
    if (!Hashable(x)) return false;
  }
  return true;
}

absl::Status UnhashableError(const Value& v) {
  return absl::InvalidArgumentError(absl::StrCat("unhashable type: '", v.TypeName(), "'"));
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [k, v] : a.dict().items) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.namespace_data() == &b.namespace_data();
    case Value::Kind::kFunction:
      return &a.func() == &b.func();
    default:
      return false;
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  const size_t epos = sci.find('e');
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string mant = sci.substr(0, epos);
  const bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += absl::StrFormat("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out;
}

namespace {

// Python's str.isprintable() for the code points that matter in practice: controls, the
// Latin-1 controls and no-break space, and the Unicode space/format characters.
bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  return true;
}

void ReprStringInto(const Str& s, StrBuilder* out) {
  const std::string& t = s.text;
  const bool use_double = t.find('\'') != std::string::npos && t.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  out->Append(std::string_view(&q, 1));
  std::string body;
  for (size_t i = 0; i < t.size();) {
    const char32_t c = DecodeUtf8(t, &i);
    if (c == '\\') {
      body += "\\\\";
    } else if (c == static_cast<char32_t>(q)) {
      body += '\\', body += q;
    } else if (c == '\n') {
      body += "\\n";
    } else if (c == '\r') {
      body += "\\r";
    } else if (c == '\t') {
      body += "\\t";
    } else if (!IsPrintable(c)) {
      body += c < 0x100 ? absl::StrFormat("\\x%02x", static_cast<int>(c))
                        : absl::StrFormat("\\u%04x", static_cast<int>(c));
    } else {
      AppendUtf8(&body, c);
    }
  }
  // The escaped text of a user string stays user content (conservatively, all of it).
  out->AppendMarked(body, HasUser(s));
  out->Append(std::string_view(&q, 1));
}

void ReprInto(const Value& v, StrBuilder* out, int depth) {
  // A namespace can hold itself (even twice); stop where Python would print its recursion
  // marker, and before such a value's repr grows without bound.
  if (depth > 300 || out->size() > (size_t{1} << 24)) {
    out->Append("...");
    return;
  }
  switch (v.kind()) {
    case Value::Kind::kString:
      ReprStringInto(v.str_data(), out);
      return;
    case Value::Kind::kList: {
      out->Append(v.is_tuple() ? "(" : "[");
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out->Append(", ");
        ReprInto(v.list()[i], out, depth + 1);
      }
      if (v.is_tuple() && v.list().size() == 1) out->Append(",");
      out->Append(v.is_tuple() ? ")" : "]");
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.is_namespace()) out->Append("<Namespace ");
      out->Append("{");
      bool first = true;
      for (const auto& [k, val] : v.dict().items) {
        if (!first) out->Append(", ");
        first = false;
        ReprInto(k, out, depth + 1);
        out->Append(": ");
        ReprInto(val, out, depth + 1);
      }
      out->Append("}");
      if (v.is_namespace()) out->Append(">");
      return;
    }
    case Value::Kind::kUndefined:
      out->Append("Undefined");
      return;
    default:
      out->Append(ToStr(v));
  }
}

}  // namespace

std::string ReprString(std::string_view s) {
  StrBuilder b;
  ReprStringInto(Str{std::string(s), {}}, &b);
  return b.Take().text;
}

Str Repr(const Value& v) {
  StrBuilder b;
  ReprInto(v, &b, 0);
  return b.Take();
}

Str ToStr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kNone:
      return {"None", {}};
    case Value::Kind::kBool:
      return {v.as_bool() ? "True" : "False", {}};
    case Value::Kind::kInt:
      return {absl::StrCat(v.as_int()), {}};
    case Value::Kind::kFloat:
      return {FloatRepr(v.as_float()), {}};
    case Value::Kind::kString:
      return v.str_data();
    case Value::Kind::kFunction:
      return {absl::StrCat("<function ", v.func().name, ">"), {}};
    default:
      return Repr(v);
  }
}

}  // namespace dq::jinja
