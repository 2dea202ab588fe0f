// Test helpers for structured output: random JSON schemas of the compiler's subset, random valid
// instances of them, serialization in the whitespace styles the grammar allows, and an
// independent validator (JSON Schema semantics, not the grammar's) that the grammar is judged
// against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dq::grammar::testing {

using Json = nlohmann::ordered_json;

// A seed that differs run to run (printed by the caller so a failure can be replayed).
inline uint64_t FreshSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Code points of UTF-8 text (what minLength / maxLength count).
inline int CodePoints(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// ---- Validator: JSON Schema semantics over the compiler's keywords. ----

inline const Json* ResolveRef(const Json& root, const std::string& ref) {
  if (ref == "#") return &root;
  return &root.at(Json::json_pointer(ref.substr(1)));
}

inline bool Validates(const Json& root, const Json& s, const Json& v);

inline bool TypeMatches(const Json& root, const Json& s, const std::string& type, const Json& v) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "string") {
    if (!v.is_string()) return false;
    const int n = CodePoints(v.get<std::string>());
    return n >= s.value("minLength", 0) && (!s.contains("maxLength") || n <= s["maxLength"]);
  }
  if (type == "array") {
    if (!v.is_array()) return false;
    const int n = static_cast<int>(v.size());
    if (n < s.value("minItems", 0) || (s.contains("maxItems") && n > s["maxItems"])) return false;
    if (s.contains("items")) {
      for (const Json& item : v) {
        if (!Validates(root, s["items"], item)) return false;
      }
    }
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return false;
    const Json props = s.value("properties", Json::object());
    for (const Json& r : s.value("required", Json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (const auto& [key, value] : v.items()) {
      if (props.contains(key)) {
        if (!Validates(root, props[key], value)) return false;
      } else if (s.contains("additionalProperties")) {
        if (!Validates(root, s["additionalProperties"], value)) return false;
      }
    }
    return true;
  }
  return false;
}

inline bool Validates(const Json& root, const Json& s, const Json& v) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) return Validates(root, *ResolveRef(root, s["$ref"]), v);
  if (s.contains("anyOf")) {
    for (const Json& alt : s["anyOf"]) {
      if (Validates(root, alt, v)) return true;
    }
    return false;
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const Json& e : s["enum"]) {
      if (v == e) return true;
    }
    return false;
  }
  if (!s.contains("type")) {
    // The compiler infers the type from the keywords present; a schema without any is "any".
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
      return TypeMatches(root, s, "object", v);
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems"))
      return TypeMatches(root, s, "array", v);
    if (s.contains("minLength") || s.contains("maxLength"))
      return TypeMatches(root, s, "string", v);
    return true;
  }
  if (s["type"].is_string()) return TypeMatches(root, s, s["type"], v);
  for (const Json& t : s["type"]) {
    if (TypeMatches(root, s, t, v)) return true;
  }
  return false;
}

// Whether some object in `text` repeats a key (JSON Schema leaves duplicates undefined).
inline bool HasDuplicateKeys(const std::string& text) {
  std::vector<std::set<std::string>> keys;
  bool dup = false;
  const Json::parser_callback_t cb = [&](int, Json::parse_event_t e, Json& parsed) {
    if (e == Json::parse_event_t::object_start) keys.emplace_back();
    if (e == Json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (e == Json::parse_event_t::key && !keys.empty()) {
      dup = dup || !keys.back().insert(parsed.get<std::string>()).second;
    }
    return true;
  };
  const Json parsed = Json::parse(text, cb, /*allow_exceptions=*/false);
  (void)parsed;
  return dup;
}

// Parses `text` strictly (one value, no duplicate keys) and validates it against `schema`.
inline bool ParsesAndValidates(const Json& schema, const std::string& text) {
  Json v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || HasDuplicateKeys(text)) return false;
  return Validates(schema, schema, v);
}

// ---- Random schemas, instances and serializations. ----

class Generator {
 public:
  // `bounded`: every document of the schemas is finite in length (strings and arrays have a
  // maximum, objects no extra properties), so a random walk through the grammar ends.
  explicit Generator(uint64_t seed, bool bounded = false) : rng_(seed), bounded_(bounded) {}

  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  std::mt19937_64& rng() { return rng_; }

  // A random schema of nesting depth <= `depth`; `defs` (if not null) collects $defs the
  // schema may $ref.
  Json Schema(int depth, Json* defs = nullptr) {
    const int kind = Int(0, depth > 0 ? 12 : 7);
    switch (kind) {
      case 0:
        return StringSchema();
      case 1:
        return Json{{"type", "integer"}};
      case 2:
        return Json{{"type", "number"}};
      case 3:
        return Json{{"type", "boolean"}};
      case 4:
        if (Coin()) return Json{{"type", "null"}};
        if (bounded_) return Json{{"type", Json::array({"string", "null"})}, {"maxLength", 4}};
        return Json{{"type", Json::array({"string", "null"})}};
      case 5:
        return Json{{"enum", ScalarList(Int(1, 4))}};
      case 6:
        return Json{{"const", Scalar()}};
      case 7:
        return Coin() ? Json{{"type", "integer"}} : StringSchema();
      case 8:
      case 9:
        return ObjectSchema(depth, defs);
      case 10:
        return ArraySchema(depth, defs);
      case 11: {
        Json alts = Json::array();
        for (int i = Int(2, 3); i > 0; --i) alts.push_back(Schema(depth - 1, defs));
        return Json{{"anyOf", alts}};
      }
      default: {
        if (defs == nullptr) return ObjectSchema(depth, defs);
        std::string name = "d";
        name += std::to_string(defs->size());
        (*defs)[name] = true;  // taken before the definition, which may add its own
        (*defs)[name] = Schema(depth - 1, defs);
        return Json{{"$ref", "#/$defs/" + name}};
      }
    }
  }

  // A whole document's schema (an object at the root, as response_format has), with $defs.
  Json RootSchema(int depth) {
    Json defs = Json::object();
    Json s = ObjectSchema(depth, &defs);
    if (!defs.empty()) s["$defs"] = defs;
    return s;
  }

  // A random value that validates against `s` (`root` resolves $ref).
  Json Instance(const Json& root, const Json& s, int depth = 0) {
    if (s.is_boolean()) return AnyValue(2);
    if (s.contains("$ref")) return Instance(root, *ResolveRef(root, s["$ref"]), depth + 1);
    if (s.contains("anyOf")) {
      const Json& alts = s["anyOf"];
      return Instance(root, alts[static_cast<size_t>(Int(0, static_cast<int>(alts.size()) - 1))],
                      depth + 1);
    }
    if (s.contains("const")) return s["const"];
    if (s.contains("enum")) return s["enum"][static_cast<size_t>(Int(0, s["enum"].size() - 1))];
    std::string type = "any";
    if (s.contains("type")) {
      const Json& t = s["type"];
      type = t.is_string() ? t.get<std::string>()
                           : t[static_cast<size_t>(Int(0, t.size() - 1))].get<std::string>();
    }
    if (type == "null") return nullptr;
    if (type == "boolean") return Coin();
    if (type == "integer") return Integer();
    if (type == "number") return Number();
    if (type == "string") return String(s.value("minLength", 0), s.value("maxLength", -1));
    if (type == "array") {
      const int lo = s.value("minItems", 0);
      const int hi = s.value("maxItems", lo + 3);
      Json a = Json::array();
      const Json items = s.value("items", Json(true));
      for (int i = Int(lo, hi); i > 0; --i) a.push_back(Instance(root, items, depth + 1));
      return a;
    }
    if (type == "object") return ObjectInstance(root, s, depth);
    return AnyValue(2);
  }

  // Any JSON value of nesting depth <= `depth`.
  Json AnyValue(int depth) {
    switch (Int(0, depth > 0 ? 6 : 4)) {
      case 0:
        return nullptr;
      case 1:
        return Coin();
      case 2:
        return Integer();
      case 3:
        return Number();
      case 4:
        return String(0, 8);
      case 5: {
        Json a = Json::array();
        for (int i = Int(0, 3); i > 0; --i) a.push_back(AnyValue(depth - 1));
        return a;
      }
      default: {
        Json o = Json::object();
        for (const char* k : {"x1", "x2", "x3"}) {
          if (Coin()) o[k] = AnyValue(depth - 1);
        }
        return o;
      }
    }
  }

  Json Integer() { return Coin(0.2) ? Json(Int(-9, 9)) : Json(Int(-2000000, 2000000)); }
  // Few significant digits, so the shortest round-trip form fits the grammar's digit limits.
  Json Number() {
    if (Coin(0.3)) return Integer();
    const int e = Coin(0.2) ? Int(-30, 30) : -Int(0, 4);
    // strtod of the decimal text: the nearest double, whose shortest form is that text's.
    const std::string text = std::to_string(Int(-99999, 99999)) + "e" + std::to_string(e);
    return std::strtod(text.c_str(), nullptr);
  }

  // A string of min..max code points (max < 0: up to min + 8) with escapes and multi-byte UTF-8.
  Json String(int min, int max) {
    static const char* kPieces[] = {"a",
                                    "Z",
                                    "7",
                                    " ",
                                    "\"",
                                    "\\",
                                    "/",
                                    "\n",
                                    "\t",
                                    "\x01",
                                    "{",
                                    "}",
                                    "\xc3\xa9",
                                    "\xe4\xb8\xad",
                                    "\xf0\x9f\x98\x80",
                                    "\x7f"};
    if (max < 0) max = min + 8;
    std::string s;
    for (int i = Int(min, max); i > 0; --i) s += kPieces[Int(0, std::size(kPieces) - 1)];
    return s;
  }

  // `v` as JSON text in one of the layouts the grammar allows (at most one space or newline
  // after '{', '[', ',', ':' and before '}', ']'); style 0 compact, 1 Python's ", " / ": ",
  // 2 spaces everywhere, 3 newlines, 4 random per place.
  std::string Serialize(const Json& v, int style) {
    std::string out;
    Write(v, style, &out);
    return out;
  }

 private:
  Json StringSchema() {
    Json s{{"type", "string"}};
    if (Coin(0.3)) s["minLength"] = Int(0, 3);
    if (bounded_ || Coin(0.3)) s["maxLength"] = s.value("minLength", 0) + Int(0, 5);
    return s;
  }

  Json Scalar() {
    switch (Int(0, 4)) {
      case 0:
        return nullptr;
      case 1:
        return Coin();
      case 2:
        return Int(-50, 50);
      case 3:
        return Number();
      default:
        return String(0, 6);
    }
  }

  Json ScalarList(int n) {
    Json list = Json::array();
    while (static_cast<int>(list.size()) < n) {
      Json v = Scalar();
      if (std::find(list.begin(), list.end(), v) == list.end()) list.push_back(v);
    }
    return list;
  }

  Json ObjectSchema(int depth, Json* defs) {
    // No name that needs an escape: an extra key (another anyOf branch's) cannot be one
    // (extra_key_rule.h); the hand-written cases cover declared ones.
    static const char* kNames[] = {"id", "name",  "tags",   "value", "a b",  "n\xc3\xa9",
                                   "x",  "items", "nested", "ok",    "\x7f~"};
    Json props = Json::object();
    Json required = Json::array();
    for (int i = Int(depth > 0 ? 1 : 0, 4); i > 0; --i) {
      const std::string name = kNames[Int(0, std::size(kNames) - 1)];
      if (props.contains(name)) continue;
      props[name] = Schema(depth - 1, defs);
      if (Coin(0.6)) required.push_back(name);
    }
    Json s{{"type", "object"}, {"properties", props}};
    if (!required.empty()) s["required"] = required;
    switch (bounded_ ? 0 : Int(0, 3)) {
      case 0:
      case 1:
        s["additionalProperties"] = false;
        break;
      case 2:
        break;  // absent: extra properties of any value
      default:
        s["additionalProperties"] = Coin() ? Json(true) : Json{{"type", "integer"}};
    }
    return s;
  }

  Json ArraySchema(int depth, Json* defs) {
    Json s{{"type", "array"}, {"items", Schema(depth - 1, defs)}};
    if (Coin(0.5)) s["minItems"] = Int(0, 2);
    if (bounded_ || Coin(0.5)) s["maxItems"] = s.value("minItems", 0) + Int(0, 3);
    return s;
  }

  Json ObjectInstance(const Json& root, const Json& s, int depth) {
    Json o = Json::object();
    const Json props = s.value("properties", Json::object());
    const Json required = s.value("required", Json::array());
    for (const auto& [key, sub] : props.items()) {
      const bool req = std::find(required.begin(), required.end(), key) != required.end();
      if (req || Coin(0.6)) o[key] = Instance(root, sub, depth + 1);
    }
    for (const Json& r : required) {  // required but not declared: any value
      if (!o.contains(r.get<std::string>())) o[r.get<std::string>()] = AnyValue(1);
    }
    const bool extras = !s.contains("additionalProperties") ||
                        !(s["additionalProperties"].is_boolean() && !s["additionalProperties"]);
    if (extras && Coin(0.4)) {
      const Json extra = s.value("additionalProperties", Json(true));
      for (int i = Int(1, 2); i > 0; --i) {
        o["extra_" + std::to_string(i)] = Instance(root, extra, depth + 1);
      }
    }
    return o;
  }

  void Ws(int style, std::string* out) {
    switch (style) {
      case 2:
        *out += ' ';
        return;
      case 3:
        *out += '\n';
        return;
      case 4: {
        const int k = Int(0, 2);
        if (k > 0) *out += k == 1 ? ' ' : '\n';
        return;
      }
      default:
        return;
    }
  }

  void Write(const Json& v, int style, std::string* out) {
    if (v.is_object() || v.is_array()) {
      const bool obj = v.is_object();
      *out += obj ? '{' : '[';
      Ws(style, out);
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) {
          *out += ',';
          if (style == 1) *out += ' ';
          Ws(style, out);
        }
        first = false;
        if (obj) {
          *out += Json(it.key()).dump() + ":";
          if (style == 1 || style == 3) *out += ' ';
          if (style == 2 || style == 4) Ws(style, out);
        }
        Write(*it, style, out);
      }
      if (!v.empty()) Ws(style, out);
      *out += obj ? '}' : ']';
      return;
    }
    *out += v.dump();
  }

  std::mt19937_64 rng_;
  bool bounded_;
};

}  // namespace dq::grammar::testing
