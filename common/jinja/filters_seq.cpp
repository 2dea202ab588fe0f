// Filters over sequences and mappings. jinja2 returns generators from map/select/reject/unique/
// batch and an iterator from reverse; here they are lists (the same items, but printing one
// shows the items rather than "<generator object ...>").
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/jinja/filters_internal.h"
#include "common/jinja/strings.h"

namespace dq::jinja::internal {
namespace {

using Getter = std::function<absl::StatusOr<Value>(const Value&)>;

Value IgnoreCase(const Value& v) {
  return v.is_string() ? Value::String(CaseMap(v.str_data(), "lower")) : v;
}

// jinja2's make_attrgetter: dotted paths, integer parts as indices, environment.getitem rules.
Getter AttrGetter(const Value& attribute, bool ignore_case, std::optional<Value> def = {}) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (absl::string_view p : absl::StrSplit(attribute.str(), '.')) {
      int64_t i;
      parts.push_back(absl::SimpleAtoi(p, &i) ? Value::Int(i) : Value::String(std::string(p)));
    }
  } else if (!attribute.is_undefined() && !attribute.is_none()) {
    parts.push_back(attribute);
  }
  return [parts, ignore_case, def](const Value& item) -> absl::StatusOr<Value> {
    Value cur = item;
    for (const Value& p : parts) {
      absl::StatusOr<Value> next = GetItem(cur, p);
      if (!next.ok()) return next.status();
      cur = *std::move(next);
      if (def && cur.is_undefined()) cur = *def;
    }
    return ignore_case ? IgnoreCase(cur) : cur;
  };
}

absl::StatusOr<std::vector<Value>> SortBy(std::vector<Value> items, const Getter& key,
                                          bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& it : items) {
    absl::StatusOr<Value> k = key(it);
    if (!k.ok()) return k.status();
    keyed.emplace_back(*std::move(k), std::move(it));
  }
  absl::Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    absl::StatusOr<int> c = reverse ? Compare(b.first, a.first) : Compare(a.first, b.first);
    if (!c.ok()) err = c.status();
    return c.ok() && *c < 0;
  });
  if (!err.ok()) return err;
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

// select/reject/selectattr/rejectattr.
absl::StatusOr<Value> SelectFilter(Interpreter& in, std::string_view name,
                                   const std::vector<Value>& items, CallArgs& args) {
  const bool attr = name == "selectattr" || name == "rejectattr";
  const bool want = name == "select" || name == "selectattr";
  std::vector<Value> rest = args.positional;
  Getter get = [](const Value& v) -> absl::StatusOr<Value> { return v; };
  if (attr) {
    if (rest.empty())
      return absl::InvalidArgumentError(absl::StrCat(std::string(name), " needs an attribute"));
    get = AttrGetter(rest[0], false);
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    test = ToStr(rest[0]).text;
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    absl::StatusOr<Value> x = get(item);
    if (!x.ok()) return x.status();
    bool pass;
    if (test.empty()) {
      pass = x->Truthy();
    } else {
      absl::StatusOr<bool> r = in.ApplyTest(test, *x, CallArgs{rest, args.kwargs});
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == want) out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MapFilter(Interpreter& in, const std::vector<Value>& items, CallArgs& args) {
  std::vector<Value> out;
  if (args.positional.empty()) {
    auto a = BindArgs("map", args, {"attribute", "default"});
    if (!a.ok()) return a.status();
    if (!(*a)[0]) return absl::InvalidArgumentError("map requires a filter argument");
    Getter get = AttrGetter(*(*a)[0], false, (*a)[1]);
    for (const Value& item : items) {
      absl::StatusOr<Value> x = get(item);
      if (!x.ok()) return x.status();
      out.push_back(*std::move(x));
    }
    return Value::List(std::move(out));
  }
  const std::string filter = ToStr(args.positional[0]).text;
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()),
                args.kwargs};
  for (const Value& item : items) {
    absl::StatusOr<Value> x = in.ApplyFilter(filter, item, rest);
    if (!x.ok()) return x.status();
    out.push_back(*std::move(x));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(std::string_view name, const std::vector<Value>& items,
                             CallArgs& args) {
  auto a = BindArgs(name, args, {"case_sensitive", "attribute"});
  if (!a.ok()) return a.status();
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  Getter key = AttrGetter((*a)[1] ? *(*a)[1] : Value::None(), !((*a)[0] && (*a)[0]->Truthy()));
  size_t best = 0;
  absl::StatusOr<Value> best_key = key(items[0]);
  if (!best_key.ok()) return best_key.status();
  for (size_t i = 1; i < items.size(); ++i) {
    absl::StatusOr<Value> k = key(items[i]);
    if (!k.ok()) return k.status();
    absl::StatusOr<int> c = Compare(*k, *best_key);
    if (!c.ok()) return c.status();
    if (name == "min" ? *c < 0 : *c > 0) best = i, best_key = *std::move(k);
  }
  return items[best];
}

absl::StatusOr<Value> Join(const std::vector<Value>& items, CallArgs& args) {
  auto a = BindArgs("join", args, {"d", "attribute"});
  if (!a.ok()) return a.status();
  const Str sep = (*a)[0] ? ToStr(*(*a)[0]) : Str{};
  Getter get = AttrGetter((*a)[1] ? *(*a)[1] : Value::None(), false);
  StrBuilder b;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::StatusOr<Value> x = get(items[i]);
    if (!x.ok()) return x.status();
    if (i) b.Append(sep);
    b.Append(ToStr(*x));
  }
  return Value::String(b.Take());
}

absl::StatusOr<Value> Sort(const std::vector<Value>& items, CallArgs& args) {
  auto a = BindArgs("sort", args, {"reverse", "case_sensitive", "attribute"});
  if (!a.ok()) return a.status();
  const bool reverse = (*a)[0] && (*a)[0]->Truthy();
  const bool ci = !((*a)[1] && (*a)[1]->Truthy());
  std::vector<Getter> keys;
  if ((*a)[2] && (*a)[2]->is_string()) {
    for (absl::string_view p : absl::StrSplit((*a)[2]->str(), ',')) {
      keys.push_back(AttrGetter(Value::String(std::string(p)), ci));
    }
  } else {
    keys.push_back(AttrGetter((*a)[2] ? *(*a)[2] : Value::None(), ci));
  }
  Getter key = [keys](const Value& v) -> absl::StatusOr<Value> {
    if (keys.size() == 1) return keys[0](v);
    std::vector<Value> parts;  // several attributes compare as a tuple
    for (const Getter& k : keys) {
      absl::StatusOr<Value> x = k(v);
      if (!x.ok()) return x.status();
      parts.push_back(*std::move(x));
    }
    return Value::List(std::move(parts));
  };
  absl::StatusOr<std::vector<Value>> out = SortBy(items, key, reverse);
  if (!out.ok()) return out.status();
  return Value::List(*std::move(out));
}

absl::StatusOr<Value> DictSort(const Value& v, CallArgs& args) {
  auto a = BindArgs("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!a.ok()) return a.status();
  if (!v.is_mapping()) return absl::InvalidArgumentError("dictsort needs a mapping");
  const bool ci = !((*a)[0] && (*a)[0]->Truthy());
  const std::string by = (*a)[1] ? ToStr(*(*a)[1]).text : "key";
  if (by != "key" && by != "value") {
    return absl::InvalidArgumentError("You can only sort by either 'key' or 'value'");
  }
  std::vector<Value> items;
  for (const auto& [k, x] : v.dict().items) items.push_back(Value::Tuple({k, x}));
  const int64_t pos = by == "key" ? 0 : 1;
  Getter key = [pos, ci](const Value& kv) -> absl::StatusOr<Value> {
    return ci ? IgnoreCase(kv.list()[pos]) : kv.list()[pos];
  };
  absl::StatusOr<std::vector<Value>> out = SortBy(items, key, (*a)[2] && (*a)[2]->Truthy());
  if (!out.ok()) return out.status();
  return Value::List(*std::move(out));
}

absl::StatusOr<Value> Unique(const std::vector<Value>& items, CallArgs& args) {
  auto a = BindArgs("unique", args, {"case_sensitive", "attribute"});
  if (!a.ok()) return a.status();
  Getter key = AttrGetter((*a)[1] ? *(*a)[1] : Value::None(), !((*a)[0] && (*a)[0]->Truthy()));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    absl::StatusOr<Value> k = key(item);
    if (!k.ok()) return k.status();
    if (!Hashable(*k)) return UnhashableError(*k);  // jinja2 keeps the keys in a set
    bool dup = false;
    for (const Value& s : seen) dup |= Equal(s, *k);
    if (dup) continue;
    seen.push_back(*std::move(k));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Batch(const std::vector<Value>& items, CallArgs& args) {
  auto a = BindArgs("batch", args, {"linecount", "fill_with"});
  if (!a.ok()) return a.status();
  if (!(*a)[0] || !(*a)[0]->is_int() || (*a)[0]->as_int() <= 0) {
    return absl::InvalidArgumentError("batch needs a positive line count");
  }
  const size_t n = static_cast<size_t>((*a)[0]->as_int());
  std::vector<Value> out, cur;
  for (const Value& item : items) {
    cur.push_back(item);
    if (cur.size() == n) out.push_back(Value::List(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if ((*a)[1] && !(*a)[1]->is_none()) {
      while (cur.size() < n) cur.push_back(*(*a)[1]);
    }
    out.push_back(Value::List(std::move(cur)));
  }
  return Value::List(std::move(out));
}

}  // namespace

std::optional<absl::StatusOr<Value>> SeqFilter(Interpreter& in, std::string_view name,
                                               const Value& v, CallArgs& args) {
  static constexpr std::string_view kNames[] = {
      "first",      "last",       "join",   "list",   "items", "dictsort",
      "selectattr", "rejectattr", "select", "reject", "map",   "unique",
      "reverse",    "sort",       "min",    "max",    "sum",   "batch"};
  if (std::find(std::begin(kNames), std::end(kNames), name) == std::end(kNames)) {
    return std::nullopt;
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::List({});
    if (!v.is_mapping()) {
      return absl::InvalidArgumentError("Can only get item pairs from a mapping.");
    }
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict().items) out.push_back(Value::Tuple({k, x}));
    return Value::List(std::move(out));
  }
  if (name == "dictsort") return DictSort(v, args);
  if (name == "reverse" && v.is_string()) {
    return Slice(v, Value::None(), Value::None(), Value::Int(-1));
  }
  // jinja2's map/select/reject(attr) start with `if value:`, so a falsy value yields nothing.
  if (!v.Truthy() && (name == "map" || name == "select" || name == "reject" ||
                      name == "selectattr" || name == "rejectattr")) {
    return Value::List({});
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(v);
  if (!items.ok()) return items.status();
  if (name == "first" || name == "last") {
    if (items->empty()) return Value::Undefined("No first item, sequence was empty.");
    return name == "first" ? items->front() : items->back();
  }
  if (name == "join") return Join(*items, args);
  if (name == "list") return Value::List(*std::move(items));
  if (name == "reverse") {
    std::reverse(items->begin(), items->end());
    return Value::List(*std::move(items));
  }
  if (name == "map") return MapFilter(in, *items, args);
  if (name == "sort") return Sort(*items, args);
  if (name == "unique") return Unique(*items, args);
  if (name == "min" || name == "max") return MinMax(name, *items, args);
  if (name == "batch") return Batch(*items, args);
  if (name == "sum") {
    auto a = BindArgs("sum", args, {"attribute", "start"});
    if (!a.ok()) return a.status();
    Getter get = AttrGetter((*a)[0] ? *(*a)[0] : Value::None(), false);
    Value total = (*a)[1] ? *(*a)[1] : Value::Int(0);
    for (const Value& item : *items) {
      absl::StatusOr<Value> x = get(item);
      if (!x.ok()) return x.status();
      absl::StatusOr<Value> t = BinaryOp("+", total, *x);
      if (!t.ok()) return t.status();
      total = *std::move(t);
    }
    return total;
  }
  return SelectFilter(in, name, *items, args);
}

}  // namespace dq::jinja::internal
