// Methods templates call on values (Python's str, dict and list methods that the sandbox
// allows and that do not mutate), and the environment's globals.
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/jinja/interpreter.h"
#include "common/jinja/strings.h"
#include "common/jinja/unicode.h"

namespace dq::jinja {
namespace {

using Fn = std::function<absl::StatusOr<Value>(const Value& self, CallArgs& args)>;

Value Bind(const Value& self, std::string_view name, Fn fn) {
  return Value::Func(std::string(name), [self, fn = std::move(fn)](Interpreter&, CallArgs& args) {
    return fn(self, args);
  });
}

absl::Status NeedString(std::string_view fn, const std::optional<Value>& v) {
  if (v && !v->is_string() && !v->is_none()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(fn), " arg must be None or str"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> StripMethod(std::string_view name, const Value& self, CallArgs& args) {
  auto a = BindArgs(name, args, {"chars"});
  if (!a.ok()) return a.status();
  if (absl::Status st = NeedString(name, (*a)[0]); !st.ok()) return st;
  const bool ws = !(*a)[0] || (*a)[0]->is_none();
  return Value::String(
      StripStr(self.str_data(), ws ? "" : (*a)[0]->str(), name != "rstrip", name != "lstrip", ws));
}

absl::StatusOr<Value> SplitMethod(std::string_view name, const Value& self, CallArgs& args) {
  auto a = BindArgs(name, args, {"sep", "maxsplit"});
  if (!a.ok()) return a.status();
  if (absl::Status st = NeedString(name, (*a)[0]); !st.ok()) return st;
  const int64_t maxsplit = (*a)[1] && (*a)[1]->is_int() ? (*a)[1]->as_int() : -1;
  const bool ws = !(*a)[0] || (*a)[0]->is_none();
  if (!ws && (*a)[0]->str().empty()) return absl::InvalidArgumentError("empty separator");
  std::vector<Str> parts =
      SplitStr(self.str_data(), ws ? "" : (*a)[0]->str(), maxsplit, ws, name == "rsplit");
  std::vector<Value> out;
  for (Str& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> AffixMethod(std::string_view name, const Value& self, CallArgs& args) {
  auto a = BindArgs(name, args, {"prefix"});
  if (!a.ok()) return a.status();
  if (!(*a)[0])
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), "() takes one argument"));
  std::vector<Value> options;
  if ((*a)[0]->is_list()) {
    options = (*a)[0]->list();
  } else {
    options.push_back(*(*a)[0]);
  }
  const std::string& s = self.str();
  for (const Value& o : options) {
    if (!o.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(name), " first arg must be str or a tuple of str"));
    }
    const std::string& p = o.str();
    const bool hit = name == "startswith"
                         ? s.compare(0, p.size(), p) == 0
                         : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> FindMethod(std::string_view name, const Value& self, CallArgs& args) {
  auto a = BindArgs(name, args, {"sub"});
  if (!a.ok()) return a.status();
  if (!(*a)[0] || !(*a)[0]->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be str, not ", (*a)[0] ? (*a)[0]->TypeName() : "nothing"));
  }
  const std::string& s = self.str();
  const std::string& sub = (*a)[0]->str();
  if (name == "count") {
    if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(s)) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  const size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return Value::Int(-1);
  return Value::Int(static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, p))));
}

absl::StatusOr<Value> ReplaceMethod(const Value& self, CallArgs& args) {
  auto a = BindArgs("replace", args, {"old", "new", "count"});
  if (!a.ok()) return a.status();
  if (!(*a)[0] || !(*a)[1] || !(*a)[0]->is_string() || !(*a)[1]->is_string()) {
    return absl::InvalidArgumentError("replace() arguments must be str");
  }
  const int64_t count = (*a)[2] && (*a)[2]->is_int() ? (*a)[2]->as_int() : -1;
  return Value::String(ReplaceStr(self.str_data(), (*a)[0]->str(), (*a)[1]->str_data(), count));
}

absl::StatusOr<Value> JoinMethod(const Value& self, CallArgs& args) {
  auto a = BindArgs("join", args, {"iterable"});
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<Value>> items = Iterate((*a)[0] ? *(*a)[0] : Value::Undefined(""));
  if (!items.ok()) return items.status();
  StrBuilder b;
  for (size_t i = 0; i < items->size(); ++i) {
    if (!(*items)[i].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence item ", i, ": expected str instance, ", (*items)[i].TypeName(), " found"));
    }
    if (i) b.Append(self.str_data());
    b.Append((*items)[i].str_data());
  }
  return Value::String(b.Take());
}

std::optional<Value> StringMethod(const Value& self, std::string_view name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Bind(self, name, [n = std::string(name)](const Value& s, CallArgs& a) {
      return StripMethod(n, s, a);
    });
  }
  if (name == "split" || name == "rsplit") {
    return Bind(self, name, [n = std::string(name)](const Value& s, CallArgs& a) {
      return SplitMethod(n, s, a);
    });
  }
  if (name == "startswith" || name == "endswith") {
    return Bind(self, name, [n = std::string(name)](const Value& s, CallArgs& a) {
      return AffixMethod(n, s, a);
    });
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return Bind(self, name, [n = std::string(name)](const Value& s, CallArgs& a) {
      return FindMethod(n, s, a);
    });
  }
  if (name == "replace") return Bind(self, name, ReplaceMethod);
  if (name == "join") return Bind(self, name, JoinMethod);
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "swapcase") {
    return Bind(self, name,
                [n = std::string(name)](const Value& s, CallArgs& a) -> absl::StatusOr<Value> {
                  if (!a.positional.empty() || !a.kwargs.empty()) {
                    return absl::InvalidArgumentError(absl::StrCat(n, "() takes no arguments"));
                  }
                  return Value::String(CaseMap(s.str_data(), n));
                });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    return Bind(self, name, [n = std::string(name)](const Value& s, CallArgs&) {
      return absl::StatusOr<Value>(Value::Bool(CharClassTest(s.str(), n)));
    });
  }
  if (name == "splitlines") {
    return Bind(self, name, [](const Value& s, CallArgs& a) -> absl::StatusOr<Value> {
      auto b = BindArgs("splitlines", a, {"keepends"});
      if (!b.ok()) return b.status();
      std::vector<Value> out;
      for (Str& p : SplitLines(s.str_data(), (*b)[0] && (*b)[0]->Truthy())) {
        out.push_back(Value::String(std::move(p)));
      }
      return Value::List(std::move(out));
    });
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& self, std::string_view name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Bind(self, name, [n = std::string(name)](const Value& d, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict().items) {
        out.push_back(n == "items" ? Value::Tuple({k, v}) : (n == "keys" ? k : v));
      }
      return absl::StatusOr<Value>(Value::List(std::move(out)));
    });
  }
  if (name == "get") {
    return Bind(self, name, [](const Value& d, CallArgs& a) -> absl::StatusOr<Value> {
      auto b = BindArgs("get", a, {"key", "default"});
      if (!b.ok()) return b.status();
      if (!(*b)[0]) return absl::InvalidArgumentError("get expected at least 1 argument, got 0");
      if (const Value* v = d.dict().Find(*(*b)[0])) return *v;
      return (*b)[1] ? *(*b)[1] : Value::None();
    });
  }
  return std::nullopt;
}

}  // namespace

std::optional<Value> GetMethod(const Value& obj, std::string_view name) {
  if (obj.is_string()) return StringMethod(obj, name);
  if (obj.is_dict()) return DictMethod(obj, name);
  if (obj.is_list() && (name == "index" || name == "count")) {
    return Bind(obj, name,
                [n = std::string(name)](const Value& l, CallArgs& a) -> absl::StatusOr<Value> {
                  if (a.positional.size() != 1)
                    return absl::InvalidArgumentError(n + "() takes 1 argument");
                  int64_t count = 0;
                  for (size_t i = 0; i < l.list().size(); ++i) {
                    if (!Equal(l.list()[i], a.positional[0])) continue;
                    if (n == "index") return Value::Int(static_cast<int64_t>(i));
                    ++count;
                  }
                  if (n == "index") return absl::InvalidArgumentError("value is not in list");
                  return Value::Int(count);
                });
  }
  return std::nullopt;
}

}  // namespace dq::jinja
