// jinja2's builtin tests (`x is defined`, `x is divisibleby 3`, ...).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/jinja/interpreter.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

absl::StatusOr<Value> OneArg(std::string_view name, const CallArgs& args) {
  if (args.positional.size() + args.kwargs.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("test '", std::string(std::string(name)), "' takes one argument"));
  }
  return args.positional.empty() ? args.kwargs[0].second : args.positional[0];
}

absl::StatusOr<bool> Parity(std::string_view name, const Value& v) {
  absl::StatusOr<Value> m = BinaryOp("%", v, Value::Int(2));
  if (!m.ok()) return m.status();
  return m->as_float() == (name == "odd" ? 1 : 0);
}

absl::StatusOr<bool> CompareTest(std::string_view op, const Value& v, const Value& other) {
  if (op == "eq") return Equal(v, other);
  if (op == "ne") return !Equal(v, other);
  if (v.is_undefined()) return UndefinedError(v);
  if (other.is_undefined()) return UndefinedError(other);
  absl::StatusOr<int> c = Compare(v, other);
  if (!c.ok()) return c.status();
  if (op == "lt") return *c < 0;
  if (op == "le") return *c <= 0;
  if (op == "gt") return *c > 0;
  return *c >= 0;
}

std::string_view CompareOp(std::string_view name) {
  if (name == "eq" || name == "equalto" || name == "==") return "eq";
  if (name == "ne" || name == "!=") return "ne";
  if (name == "lt" || name == "lessthan" || name == "<") return "lt";
  if (name == "le" || name == "<=") return "le";
  if (name == "gt" || name == "greaterthan" || name == ">") return "gt";
  if (name == "ge" || name == ">=") return "ge";
  return "";
}

}  // namespace

absl::StatusOr<bool> RunTest(Interpreter&, std::string_view name, const Value& v, CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
  // Undefined defines __call__ (it raises), so Python's callable() says yes.
  if (name == "callable") return v.is_function() || v.is_undefined();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {  // str(value).islower() / isupper()
    const std::string s = ToStr(v).text;
    bool cased = false;
    for (size_t i = 0; i < s.size();) {
      const char32_t c = DecodeUtf8(s, &i);
      const bool is_upper = ToLowerCp(c) != c, is_lower = ToUpperCp(c) != c;
      if (name == "lower" ? is_upper : is_lower) return false;
      cased |= is_upper || is_lower;
    }
    return cased;
  }
  if (name == "odd" || name == "even") return Parity(name, v);
  if (name == "divisibleby") {
    absl::StatusOr<Value> n = OneArg(name, args);
    if (!n.ok()) return n.status();
    absl::StatusOr<Value> m = BinaryOp("%", v, *n);
    if (!m.ok()) return m.status();
    return m->as_float() == 0;
  }
  if (name == "in") {
    absl::StatusOr<Value> seq = OneArg(name, args);
    if (!seq.ok()) return seq.status();
    return Contains(*seq, v);
  }
  if (name == "sameas") {
    absl::StatusOr<Value> other = OneArg(name, args);
    if (!other.ok()) return other.status();
    // Python identity: the singletons compare by value, containers by sharing.
    if (v.kind() != other->kind()) return false;
    if (v.is_none() || v.is_bool() || v.is_int()) return Equal(v, *other);
    if (v.is_list()) return &v.list() == &other->list();
    if (v.is_mapping()) return &v.dict() == &other->dict();
    return Equal(v, *other);
  }
  if (std::string_view op = CompareOp(name); !op.empty()) {
    absl::StatusOr<Value> other = OneArg(name, args);
    if (!other.ok()) return other.status();
    return CompareTest(op, v, *other);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("No test named '", std::string(std::string(name)), "'."));
}

}  // namespace dq::jinja
