// The globals of transformers' chat template environment: jinja2's defaults (range, dict,
// namespace, joiner, cycler-less) plus raise_exception and strftime_now.
#include <ctime>

#include "absl/strings/str_cat.h"
#include "common/jinja/interpreter.h"

namespace dq::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox refuses longer ranges

absl::StatusOr<Value> Range(Interpreter&, CallArgs& a) {
  if (!a.kwargs.empty() || a.positional.empty() || a.positional.size() > 3) {
    return absl::InvalidArgumentError("range expected 1 to 3 integer arguments");
  }
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = 0, stop, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else {
    start = a.positional[0].as_int(), stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  }
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      return absl::OutOfRangeError(absl::StrCat(
          "Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ")."));
    }
    out.push_back(Value::Int(i));
  }
  return Value::List(std::move(out));
}

// dict(mapping, **kw) and namespace(mapping, **kw) take the same arguments.
absl::StatusOr<std::vector<std::pair<Value, Value>>> MappingArgs(std::string_view fn,
                                                                 const CallArgs& a) {
  std::vector<std::pair<Value, Value>> kv;
  if (a.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(fn), " expected at most 1 argument"));
  }
  if (!a.positional.empty()) {
    const Value& m = a.positional[0];
    if (!m.is_mapping()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(fn), "() argument must be a mapping"));
    }
    kv = m.dict().items;
  }
  for (const auto& [k, v] : a.kwargs) {
    bool replaced = false;
    for (auto& [ek, ev] : kv) {
      if (ek.is_string() && ek.str() == k) ev = v, replaced = true;
    }
    if (!replaced) kv.emplace_back(Value::String(k), v);
  }
  return kv;
}

std::string RealStrftime(std::string_view format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  const size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

void AddGlobals(std::map<std::string, Value, std::less<>>* g) {
  (*g)["range"] = Value::Func("range", Range);
  (*g)["dict"] = Value::Func("dict", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
    auto kv = MappingArgs("dict", a);
    if (!kv.ok()) return kv.status();
    return Value::Dict(*std::move(kv));
  });
  (*g)["namespace"] =
      Value::Func("namespace", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
        auto kv = MappingArgs("namespace", a);
        if (!kv.ok()) return kv.status();
        Value ns = Value::Namespace(*std::move(kv));
        in.KeepNamespace(ns);
        return ns;
      });
  (*g)["raise_exception"] =
      Value::Func("raise_exception", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
        const std::string msg = a.positional.empty() ? "" : ToStr(a.positional[0]).text;
        return absl::InvalidArgumentError(absl::StrCat("raise_exception: ", msg));
      });
  (*g)["strftime_now"] =
      Value::Func("strftime_now", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
        if (a.positional.size() != 1 || !a.positional[0].is_string()) {
          return absl::InvalidArgumentError("strftime_now(format) takes one string");
        }
        const auto& fn = in.options().strftime_now;
        return Value::String(fn ? fn(a.positional[0].str()) : RealStrftime(a.positional[0].str()));
      });
  (*g)["joiner"] = Value::Func("joiner", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
    auto b = BindArgs("joiner", a, {"sep"});
    if (!b.ok()) return b.status();
    const Value sep = (*b)[0] ? *(*b)[0] : Value::String(", ");
    // The joiner's own state: it prints nothing the first time it is called.
    auto used = std::make_shared<bool>(false);
    return Value::Func("joiner", [sep, used](Interpreter&, CallArgs&) -> absl::StatusOr<Value> {
      if (!*used) {
        *used = true;
        return Value::String("");
      }
      return sep;
    });
  });
}

}  // namespace dq::jinja
