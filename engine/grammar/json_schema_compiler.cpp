#include "engine/grammar/json_schema_compiler.h"

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/grammar/extra_key_rule.h"
#include "nlohmann/json.hpp"

namespace dq::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kIntDigits = 16;
constexpr int kFracDigits = 16;
// Two exponent digits keep every number a finite double (16 digits e99 < 1.8e308): strict
// parsers (nlohmann, serde_json, Go) refuse "1e400" as out of range.
constexpr int kExpDigits = 2;

constexpr std::string_view kAnnotations[] = {"title",    "description", "$schema",  "$id",
                                             "$comment", "default",     "examples", "deprecated",
                                             "readOnly", "writeOnly",   "$defs",    "definitions"};
constexpr std::string_view kHandled[] = {
    "type",     "properties", "required", "additionalProperties",
    "items",    "enum",       "const",    "anyOf",
    "$ref",     "minItems",   "maxItems", "minLength",
    "maxLength"};

bool Contains(std::span<const std::string_view> list, std::string_view key) {
  for (std::string_view k : list) {
    if (k == key) return true;
  }
  return false;
}

absl::Status Bad(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("json_schema at ", path, ": ", std::string(what)));
}

// "~1" -> "/", "~0" -> "~" (RFC 6901).
std::string UnescapePointer(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += token[i];
    }
  }
  return out;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& root) : root_(root) {}

  absl::StatusOr<Grammar> Compile() {
    const int32_t rule = b_.AddRule("root");
    const int32_t end = b_.NewState(rule);
    b_.Final(end);
    DQ_RETURN_IF_ERROR(Value(root_, "#", b_.Start(rule), end));
    return std::move(b_).Finish(rule);
  }

 private:
  absl::Status CheckKeywords(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.items()) {
      if (Contains(kHandled, key) || Contains(kAnnotations, key)) continue;
      return Bad(path, absl::StrCat("the keyword '", key,
                                    "' is not supported; supported: type, properties, required, "
                                    "additionalProperties, items, minItems, maxItems, minLength, "
                                    "maxLength, enum, const, anyOf, $ref"));
    }
    return absl::OkStatus();
  }

  absl::Status Value(const Json& s, const std::string& path, int32_t from, int32_t to) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad(path, "the schema 'false' admits no value");
      b_.Call(from, AnyValueRule(), to);
      return absl::OkStatus();
    }
    if (!s.is_object()) return Bad(path, "a schema must be an object or a boolean");
    DQ_RETURN_IF_ERROR(CheckKeywords(s, path));
    if (s.contains("$ref")) return Ref(s, path, from, to);
    if (s.contains("anyOf")) return AnyOf(s, path, from, to);
    if (s.contains("enum") || s.contains("const")) return Enum(s, path, from, to);
    if (!s.contains("type")) return Typed(s, InferType(s), path, from, to);
    const Json& type = s["type"];
    if (type.is_string()) return Typed(s, type.get<std::string>(), path, from, to);
    if (!type.is_array() || type.empty()) {
      return Bad(path, "'type' must be a type name or a non-empty list of them");
    }
    for (const Json& t : type) {
      if (!t.is_string()) return Bad(path, "'type' lists must hold type names");
      DQ_RETURN_IF_ERROR(Typed(s, t.get<std::string>(), path, from, to));
    }
    return absl::OkStatus();
  }

  static std::string InferType(const Json& s) {
    for (const char* k : {"properties", "required", "additionalProperties"}) {
      if (s.contains(k)) return "object";
    }
    for (const char* k : {"items", "minItems", "maxItems"}) {
      if (s.contains(k)) return "array";
    }
    if (s.contains("minLength") || s.contains("maxLength")) return "string";
    return "any";
  }

  absl::Status Typed(const Json& s, const std::string& type, const std::string& path, int32_t from,
                     int32_t to) {
    if (type == "object") return Object(s, path, from, to);
    if (type == "array") return Array(s, path, from, to);
    if (type == "string") return String(s, path, from, to);
    if (type == "number" || type == "integer") {
      Number(from, to, type == "integer");
      return absl::OkStatus();
    }
    if (type == "boolean") {
      b_.Literal(from, "true", to);
      b_.Literal(from, "false", to);
      return absl::OkStatus();
    }
    if (type == "null") {
      b_.Literal(from, "null", to);
      return absl::OkStatus();
    }
    if (type == "any") {
      b_.Call(from, AnyValueRule(), to);
      return absl::OkStatus();
    }
    return Bad(path, absl::StrCat("unknown type '", type,
                                  "'; use object, array, string, number, integer, boolean or "
                                  "null"));
  }

  absl::Status AnyOf(const Json& s, const std::string& path, int32_t from, int32_t to) {
    const Json& alts = s["anyOf"];
    if (!alts.is_array() || alts.empty()) return Bad(path, "'anyOf' must be a non-empty list");
    for (const auto& [key, v] : s.items()) {
      if (key != "anyOf" && Contains(kHandled, key)) {
        return Bad(path, absl::StrCat("'anyOf' beside '", key,
                                      "' is not supported; move it into each alternative"));
      }
    }
    for (size_t i = 0; i < alts.size(); ++i) {
      DQ_RETURN_IF_ERROR(Value(alts[i], absl::StrCat(path, "/anyOf/", i), from, to));
    }
    return absl::OkStatus();
  }

  absl::Status Enum(const Json& s, const std::string& path, int32_t from, int32_t to) {
    if (s.contains("const")) {
      b_.Literal(from, s["const"].dump(), to);
      return absl::OkStatus();
    }
    const Json& values = s["enum"];
    if (!values.is_array() || values.empty()) return Bad(path, "'enum' must be a non-empty list");
    for (const Json& v : values) b_.Literal(from, v.dump(), to);
    return absl::OkStatus();
  }

  absl::Status Ref(const Json& s, const std::string& path, int32_t from, int32_t to) {
    const Json& ref = s["$ref"];
    if (!ref.is_string()) return Bad(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    auto it = ref_rules_.find(target);
    if (it != ref_rules_.end()) {
      b_.Call(from, it->second, to);
      return absl::OkStatus();
    }
    if (target.empty() || target[0] != '#') {
      return Bad(path, absl::StrCat("'$ref' ", target,
                                    " is not supported; only references into this schema "
                                    "(#, #/$defs/...) are"));
    }
    const Json* node = &root_;
    std::string_view rest = std::string_view(target).substr(1);
    while (!rest.empty()) {
      if (rest[0] != '/') return Bad(path, absl::StrCat("'$ref' ", target, " is malformed"));
      rest.remove_prefix(1);
      const size_t slash = rest.find('/');
      const std::string token = UnescapePointer(rest.substr(0, slash));
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        return Bad(path, absl::StrCat("'$ref' ", target, " points at nothing in the schema"));
      }
    }
    const int32_t rule = b_.AddRule(absl::StrCat("ref ", target));
    ref_rules_[target] = rule;
    const int32_t end = b_.NewState(rule);
    b_.Final(end);
    DQ_RETURN_IF_ERROR(Value(*node, target, b_.Start(rule), end));
    b_.Call(from, rule, to);
    return absl::OkStatus();
  }

  // At most one whitespace character.
  void Ws(int32_t from, int32_t to) {
    b_.Eps(from, to);
    b_.Byte(from, ' ', to);
    b_.Byte(from, '\n', to);
  }

  void Digits(int32_t from, int32_t to, int min, int max) {
    int32_t at = from;
    for (int i = 0; i < max; ++i) {
      if (i >= min) b_.Eps(at, to);
      const int32_t next = i + 1 == max ? to : b_.NewState(b_.RuleOf(from));
      b_.Bytes(at, '0', '9', next);
      at = next;
    }
  }

  void Number(int32_t from, int32_t to, bool integer) {
    const int32_t rule = b_.RuleOf(from);
    const int32_t sign = b_.NewState(rule);
    b_.Eps(from, sign);
    b_.Byte(from, '-', sign);
    const int32_t int_end = b_.NewState(rule);
    b_.Byte(sign, '0', int_end);
    const int32_t lead = b_.NewState(rule);
    b_.Bytes(sign, '1', '9', lead);
    Digits(lead, int_end, 0, kIntDigits - 1);
    b_.Eps(int_end, to);
    if (integer) return;
    const int32_t dot = b_.NewState(rule);
    const int32_t frac_end = b_.NewState(rule);
    b_.Byte(int_end, '.', dot);
    Digits(dot, frac_end, 1, kFracDigits);
    b_.Eps(frac_end, to);
    const int32_t e = b_.NewState(rule);
    const int32_t esign = b_.NewState(rule);
    b_.Byte(int_end, 'e', e);
    b_.Byte(int_end, 'E', e);
    b_.Byte(frac_end, 'e', e);
    b_.Byte(frac_end, 'E', e);
    b_.Eps(e, esign);
    b_.Byte(e, '+', esign);
    b_.Byte(e, '-', esign);
    Digits(esign, to, 1, kExpDigits);
  }

  // `from` -[hex]-> ... -> `to`: `n` hex digits.
  void Hex(int32_t from, int32_t to, int n) {
    for (int i = 0; i < n; ++i) {
      const int32_t next = i + 1 == n ? to : b_.NewState(b_.RuleOf(from));
      b_.Bytes(from, '0', '9', next);
      b_.Bytes(from, 'a', 'f', next);
      b_.Bytes(from, 'A', 'F', next);
      from = next;
    }
  }

  // After "\": u and a code point that is not a surrogate, or a high surrogate followed by
  // "\u" and a low one. A lone surrogate is valid JSON text but not a character: strict
  // parsers (nlohmann's, Python's with surrogatepass off) refuse it, and a pair must count as
  // one character for minLength / maxLength.
  void UnicodeEscape(int32_t esc, int32_t to) {
    const int32_t rule = b_.RuleOf(esc);
    auto state = [&] { return b_.NewState(rule); };
    const int32_t u = state();
    b_.Byte(esc, 'u', u);
    const int32_t plain = state();  // first digit not d/D: 3 more digits
    b_.Bytes(u, '0', '9', plain);
    b_.Bytes(u, 'a', 'c', plain);
    b_.Bytes(u, 'A', 'C', plain);
    b_.Bytes(u, 'e', 'f', plain);
    b_.Bytes(u, 'E', 'F', plain);
    Hex(plain, to, 3);
    const int32_t d = state();
    b_.Byte(u, 'd', d);
    b_.Byte(u, 'D', d);
    const int32_t low_half = state();  // \uD000-\uD7FF
    b_.Bytes(d, '0', '7', low_half);
    Hex(low_half, to, 2);
    const int32_t high = state(), high_end = state();  // \uD800-\uDBFF
    for (char c : std::string_view("89abAB")) b_.Byte(d, static_cast<uint8_t>(c), high);
    Hex(high, high_end, 2);
    const int32_t u2 = state(), d2 = state(), low = state();
    b_.Literal(high_end, "\\u", u2);
    b_.Byte(u2, 'd', d2);
    b_.Byte(u2, 'D', d2);
    for (char c : std::string_view("cdefCDEF")) b_.Byte(d2, static_cast<uint8_t>(c), low);
    Hex(low, to, 2);
  }

  // One JSON string character (an unescaped UTF-8 character or an escape) from `from` to `to`.
  void StringChar(int32_t from, int32_t to) {
    const int32_t rule = b_.RuleOf(from);
    auto state = [&] { return b_.NewState(rule); };
    b_.Bytes(from, 0x20, 0x21, to);
    b_.Bytes(from, 0x23, 0x5B, to);  // skips '"' (0x22) and '\\' (0x5C)
    b_.Bytes(from, 0x5D, 0x7F, to);
    const int32_t esc = state();
    b_.Byte(from, '\\', esc);
    for (char c : std::string_view("\"\\/bfnrt")) b_.Byte(esc, static_cast<uint8_t>(c), to);
    UnicodeEscape(esc, to);
    // Well-formed UTF-8 only (RFC 3629): no overlongs, no surrogates, nothing past U+10FFFF.
    const int32_t t1 = state(), t2 = state(), t3 = state();
    b_.Bytes(t1, 0x80, 0xBF, to);
    b_.Bytes(t2, 0x80, 0xBF, t1);
    b_.Bytes(t3, 0x80, 0xBF, t2);
    b_.Bytes(from, 0xC2, 0xDF, t1);
    const int32_t e0 = state(), ed = state(), f0 = state(), f4 = state();
    b_.Byte(from, 0xE0, e0);
    b_.Bytes(e0, 0xA0, 0xBF, t1);
    b_.Bytes(from, 0xE1, 0xEC, t2);
    b_.Byte(from, 0xED, ed);
    b_.Bytes(ed, 0x80, 0x9F, t1);
    b_.Bytes(from, 0xEE, 0xEF, t2);
    b_.Byte(from, 0xF0, f0);
    b_.Bytes(f0, 0x90, 0xBF, t2);
    b_.Bytes(from, 0xF1, 0xF3, t3);
    b_.Byte(from, 0xF4, f4);
    b_.Bytes(f4, 0x80, 0x8F, t2);
  }

  // A string rule of min..max characters (max < 0: unbounded); one shared rule per bound.
  int32_t StringRule(int min, int max) {
    const auto key = std::make_pair(min, max);
    if (auto it = string_rules_.find(key); it != string_rules_.end()) return it->second;
    const int32_t rule = b_.AddRule(absl::StrCat("string ", min, "..", max));
    string_rules_[key] = rule;
    const int32_t end = b_.NewState(rule);
    b_.Final(end);
    int32_t at = b_.NewState(rule);
    b_.Byte(b_.Start(rule), '"', at);
    const int last = max < 0 ? min : max;
    for (int i = 0;; ++i) {
      if (i >= min) b_.Byte(at, '"', end);
      if (i == last) {
        if (max < 0) StringChar(at, at);
        break;
      }
      const int32_t next = b_.NewState(rule);
      StringChar(at, next);
      at = next;
    }
    return rule;
  }

  absl::StatusOr<int> Count(const Json& s, const char* key, const std::string& path, int dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Bad(path, absl::StrCat("'", key, "' must be a non-negative integer"));
    }
    if (v.get<int64_t>() > kMaxUnrolledCount) {
      return Bad(path, absl::StrCat("'", key, "' above ", kMaxUnrolledCount,
                                    " is not supported; got ", v.get<int64_t>()));
    }
    return static_cast<int>(v.get<int64_t>());
  }

  absl::Status String(const Json& s, const std::string& path, int32_t from, int32_t to) {
    DQ_ASSIGN_OR_RETURN(const int min, Count(s, "minLength", path, 0));
    DQ_ASSIGN_OR_RETURN(const int max, Count(s, "maxLength", path, -1));
    if (max >= 0 && max < min) return Bad(path, "'maxLength' is below 'minLength'");
    b_.Call(from, StringRule(min, max), to);
    return absl::OkStatus();
  }

  absl::Status Array(const Json& s, const std::string& path, int32_t from, int32_t to) {
    DQ_ASSIGN_OR_RETURN(const int min, Count(s, "minItems", path, 0));
    DQ_ASSIGN_OR_RETURN(const int max, Count(s, "maxItems", path, -1));
    if (max >= 0 && max < min) return Bad(path, "'maxItems' is below 'minItems'");
    const bool plain = !s.contains("items") && min == 0 && max < 0;
    if (plain && any_array_rule_ >= 0) {
      b_.Call(from, any_array_rule_, to);
      return absl::OkStatus();
    }
    const Json items = s.contains("items") ? s["items"] : Json(true);
    const std::string items_path = path + "/items";
    const int32_t rule = b_.AddRule("array " + path);
    if (plain) any_array_rule_ = rule;
    const int32_t end = b_.NewState(rule);
    b_.Final(end);
    const int32_t open = b_.NewState(rule);
    b_.Byte(b_.Start(rule), '[', open);
    int32_t at = b_.NewState(rule);
    Ws(open, at);
    auto close = [&](int32_t after) {
      const int32_t c = b_.NewState(rule);
      Ws(after, c);
      b_.Byte(c, ']', end);
    };
    if (min == 0) close(at);
    const int last = max < 0 ? std::max(min, 1) : max;
    for (int i = 0; i < last; ++i) {
      int32_t item_from = at;
      if (i > 0) {
        const int32_t comma = b_.NewState(rule);
        b_.Byte(at, ',', comma);
        item_from = b_.NewState(rule);
        Ws(comma, item_from);
      }
      const int32_t after = b_.NewState(rule);
      DQ_RETURN_IF_ERROR(Value(items, items_path, item_from, after));
      if (i + 1 >= min) close(after);
      at = after;
    }
    if (max < 0) {  // more items, unbounded: loop on the last count
      const int32_t comma = b_.NewState(rule);
      b_.Byte(at, ',', comma);
      const int32_t item_from = b_.NewState(rule);
      Ws(comma, item_from);
      DQ_RETURN_IF_ERROR(Value(items, items_path, item_from, at));
    }
    b_.Call(from, rule, to);
    return absl::OkStatus();
  }

  struct Property {
    std::string key;
    const Json* schema;  // null: any value
    bool required;
  };

  absl::StatusOr<std::vector<Property>> Properties(const Json& s, const std::string& path) {
    std::vector<Property> props;
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Bad(path, "'required' must be a list of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return Bad(path, "'required' must be a list of names");
        required.push_back(r.get<std::string>());
      }
    }
    auto is_required = [&](const std::string& k) {
      return std::find(required.begin(), required.end(), k) != required.end();
    };
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return Bad(path, "'properties' must be an object");
      for (const auto& [key, sub] : s["properties"].items()) {
        props.push_back({key, &sub, is_required(key)});
      }
    }
    for (const std::string& r : required) {
      bool declared = false;
      for (const Property& p : props) declared = declared || p.key == r;
      if (!declared) props.push_back({r, nullptr, true});
    }
    return props;
  }

  // `[,ws] "key" [ws] : [ws] value` from `from` to `to`.
  absl::Status Member(const Property& p, bool comma, const std::string& path, int32_t from,
                      int32_t to) {
    const int32_t rule = b_.RuleOf(from);
    int32_t at = from;
    if (comma) {
      const int32_t c = b_.NewState(rule);
      b_.Byte(at, ',', c);
      at = b_.NewState(rule);
      Ws(c, at);
    }
    const int32_t colon = b_.NewState(rule);
    b_.Literal(at, Json(p.key).dump() + ":", colon);
    const int32_t value = b_.NewState(rule);
    Ws(colon, value);
    if (p.schema == nullptr) {
      b_.Call(value, AnyValueRule(), to);
      return absl::OkStatus();
    }
    return Value(*p.schema, absl::StrCat(path, "/properties/", p.key), value, to);
  }

  absl::Status Object(const Json& s, const std::string& path, int32_t from, int32_t to) {
    DQ_ASSIGN_OR_RETURN(const std::vector<Property> props, Properties(s, path));
    const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    const bool any_extra = extra == nullptr || (extra->is_boolean() && extra->get<bool>());
    const bool plain = props.empty() && any_extra;
    if (plain && any_object_rule_ >= 0) {
      b_.Call(from, any_object_rule_, to);
      return absl::OkStatus();
    }
    const int32_t rule = b_.AddRule("object " + path);
    if (plain) any_object_rule_ = rule;
    const int32_t end = b_.NewState(rule);
    b_.Final(end);
    const int32_t open = b_.NewState(rule);
    b_.Byte(b_.Start(rule), '{', open);
    // cur[e]: after the properties so far, e = whether any was written (a comma is due).
    int32_t cur[2] = {b_.NewState(rule), -1};
    Ws(open, cur[0]);
    for (const Property& p : props) {
      int32_t next[2] = {p.required || cur[0] < 0 ? -1 : b_.NewState(rule), b_.NewState(rule)};
      for (int e = 0; e < 2; ++e) {
        if (cur[e] < 0) continue;
        if (!p.required) b_.Eps(cur[e], next[e]);
        DQ_RETURN_IF_ERROR(Member(p, e == 1, path, cur[e], next[1]));
      }
      cur[0] = next[0];
      cur[1] = next[1];
    }
    std::vector<int32_t> closers;
    for (int32_t c : cur) {
      if (c >= 0) closers.push_back(c);
    }
    if (extra == nullptr || !(extra->is_boolean() && !extra->get<bool>())) {
      const Property p{"", extra != nullptr && extra->is_object() ? extra : nullptr, false};
      std::vector<std::string> names;
      for (const Property& d : props) names.push_back(d.key);
      const int32_t key =
          names.empty() ? StringRule(0, -1) : AddExtraKeyRule(b_, "extra key " + path, names);
      const int32_t more = b_.NewState(rule);
      for (int e = 0; e < 2; ++e) {
        if (cur[e] >= 0) DQ_RETURN_IF_ERROR(ExtraMember(p, key, e == 1, path, cur[e], more));
      }
      DQ_RETURN_IF_ERROR(ExtraMember(p, key, true, path, more, more));
      closers.push_back(more);
    }
    for (int32_t c : closers) {
      const int32_t before = b_.NewState(rule);
      Ws(c, before);
      b_.Byte(before, '}', end);
    }
    b_.Call(from, rule, to);
    return absl::OkStatus();
  }

  // An extra member: a key of rule `key` (not a declared name), then a value of
  // additionalProperties' schema (or any).
  absl::Status ExtraMember(const Property& p, int32_t key, bool comma, const std::string& path,
                           int32_t from, int32_t to) {
    const int32_t rule = b_.RuleOf(from);
    int32_t at = from;
    if (comma) {
      const int32_t c = b_.NewState(rule);
      b_.Byte(at, ',', c);
      at = b_.NewState(rule);
      Ws(c, at);
    }
    const int32_t key_end = b_.NewState(rule);
    b_.Call(at, key, key_end);
    const int32_t colon = b_.NewState(rule);
    b_.Byte(key_end, ':', colon);
    const int32_t value = b_.NewState(rule);
    Ws(colon, value);
    if (p.schema == nullptr) {
      b_.Call(value, AnyValueRule(), to);
      return absl::OkStatus();
    }
    return Value(*p.schema, path + "/additionalProperties", value, to);
  }

  // Any JSON value.
  int32_t AnyValueRule() {
    if (any_rule_ >= 0) return any_rule_;
    any_rule_ = b_.AddRule("any value");
    const int32_t start = b_.Start(any_rule_);
    const int32_t end = b_.NewState(any_rule_);
    b_.Final(end);
    const Json any_object = Json::object();
    const Json any_array = {{"type", "array"}};
    (void)Object(any_object, "#any", start, end);  // cannot fail: no keywords
    (void)Array(any_array, "#any", start, end);
    b_.Call(start, StringRule(0, -1), end);
    Number(start, end, false);
    for (const char* lit : {"true", "false", "null"}) b_.Literal(start, lit, end);
    return any_rule_;
  }

  const Json& root_;
  GrammarBuilder b_;
  std::map<std::string, int32_t> ref_rules_;
  std::map<std::pair<int, int>, int32_t> string_rules_;
  int32_t any_rule_ = -1;
  int32_t any_object_rule_ = -1;
  int32_t any_array_rule_ = -1;
};

}  // namespace

absl::StatusOr<Grammar> CompileJsonSchema(std::string_view schema_json) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError(
        "json_schema is not valid JSON; send the schema as an object");
  }
  SchemaCompiler compiler(schema);
  return compiler.Compile();
}

}  // namespace dq::grammar
