// The dynamic value of the Jinja interpreter, with Python's semantics (what jinja2 does, since
// it compiles templates to Python): truthiness, ==, ordering, str() and repr().
//
// Strings carry provenance: the byte ranges of their text that came from untrusted input (a
// chat message's content). Concatenation, slicing, strip/replace/split and the output buffer
// keep those ranges, so the rendered prompt knows which bytes the caller wrote and the tokenizer
// can refuse to parse special tokens there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text_range.h"

namespace dq::jinja {

class Value;
class Interpreter;

// A string and the sorted, disjoint, non-adjacent byte ranges of it that are user content.
struct Str {
  std::string text;
  std::vector<TextRange> user;
};

// Builds a Str from pieces, merging adjacent user ranges.
class StrBuilder {
 public:
  void Append(std::string_view plain) { text_.append(plain); }
  void Append(const Str& s);
  // Appends `text` whose user-ness is all-or-nothing.
  void AppendMarked(std::string_view text, bool user);
  // Appends s.text[begin, end) with the ranges that fall inside it.
  void AppendSlice(const Str& s, size_t begin, size_t end);
  size_t size() const { return text_.size(); }
  const std::string& text() const { return text_; }
  Str Take();

 private:
  void AddRange(size_t begin, size_t end);
  std::string text_;
  std::vector<TextRange> user_;
};

bool HasUser(const Str& s);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// A callable: a builtin, a bound method, a macro or `caller`.
struct Function {
  std::string name;
  std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn;
};

// Insertion-ordered like Python's dict. Lookup is linear: template data is small.
struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(const Value& key, Value value);
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,  // namespace(): a dict whose attributes `set ns.x = ...` may assign
    kFunction,
  };

  Value() = default;  // undefined
  // `name` says what was undefined, for the error an operation on it raises.
  static Value Undefined(std::string name);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);      // template-written text
  static Value UserString(std::string s);  // the whole string is user content
  static Value String(Str s);
  // markupsafe.Markup: a string that escape leaves alone (what |safe and |e return).
  static Value Markup(Str s);
  static Value List(std::vector<Value> items);
  // A Python tuple: a list that prints as (a, b) and never equals a list.
  static Value Tuple(std::vector<Value> items);
  static Value Dict(std::vector<std::pair<Value, Value>> items);
  static Value Namespace(std::vector<std::pair<Value, Value>> items);
  static Value Func(std::string name,
                    std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers include bool.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && b_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && b_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_mapping() const { return is_dict() || is_namespace(); }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  // For bool and int (Python's bool is an int).
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return is_float() ? d_ : static_cast<double>(as_int()); }
  const std::string& str() const { return str_->text; }
  const Str& str_data() const { return *str_; }
  const std::vector<Value>& list() const { return *list_; }
  const DictData& dict() const { return *dict_; }
  DictData& namespace_data() const { return *dict_; }  // a namespace is shared and mutable
  const Function& func() const { return *func_; }
  // The name an undefined value stands for ("" when none).
  const std::string& undefined_name() const;

  bool Truthy() const;
  // Python's type name, for error messages.
  const char* TypeName() const;

  // How deeply lists and dicts nest inside this value (0 for a scalar). The interpreter bounds
  // it so that the recursive operations (==, repr, tojson) cannot exhaust the stack.
  uint32_t depth() const { return depth_; }

  // Dict lookup by string key; nullptr when absent or not a mapping.
  const Value* Get(std::string_view key) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  uint32_t depth_ = 0;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const Str> str_;  // string, or an undefined value's name
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const Function> func_;
};

// Python's hash() would accept it: not a list or dict, nor a tuple holding one.
bool Hashable(const Value& v);
absl::Status UnhashableError(const Value& v);

// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <: -1, 0, 1, or TypeError as InvalidArgument for unorderable types.
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// Python's str() and repr(). A user string's text stays marked as user inside the result.
Str ToStr(const Value& v);
Str Repr(const Value& v);
std::string ReprString(std::string_view s);
// Python's repr() of a float: shortest round trip, exponent form outside [1e-4, 1e16).
std::string FloatRepr(double d);

}  // namespace dq::jinja
