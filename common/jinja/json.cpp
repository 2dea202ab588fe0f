// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=...,
// sort_keys=...), byte for byte, including Python's float repr and its indent layout.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/jinja/interpreter.h"

namespace dq::jinja {
namespace {

constexpr int kMaxJsonDepth = 200;

struct JsonStyle {
  bool pretty = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};

void EscapeInto(const Str& s, StrBuilder* out) {
  std::string body;
  for (unsigned char c : s.text) {
    switch (c) {
      case '"':
        body += "\\\"";
        break;
      case '\\':
        body += "\\\\";
        break;
      case '\n':
        body += "\\n";
        break;
      case '\r':
        body += "\\r";
        break;
      case '\t':
        body += "\\t";
        break;
      case '\b':
        body += "\\b";
        break;
      case '\f':
        body += "\\f";
        break;
      default:
        if (c < 0x20) {
          body += absl::StrFormat("\\u%04x", c);
        } else {
          body.push_back(static_cast<char>(c));
        }
    }
  }
  out->Append("\"");
  out->AppendMarked(body, HasUser(s));  // escaped user text stays user content
  out->Append("\"");
}

absl::StatusOr<Str> KeyString(const Value& k) {
  if (k.is_string()) return k.str_data();
  if (k.is_bool()) return Str{k.as_bool() ? "true" : "false", {}};
  if (k.is_none()) return Str{"null", {}};
  if (k.is_int() || k.is_float()) return ToStr(k);
  return absl::InvalidArgumentError(
      absl::StrCat("keys must be str, int, float, bool or None, not ", k.TypeName()));
}

absl::Status Dump(const Value& v, const JsonStyle& st, int level, StrBuilder* out);

// json.dumps' layout: with an indent, every item on its own line, closers at the parent's indent.
void Newline(const JsonStyle& st, int level, StrBuilder* out) {
  if (!st.pretty) return;
  out->Append("\n");
  for (int i = 0; i < level; ++i) out->Append(st.indent);
}

absl::Status DumpList(const Value& v, const JsonStyle& st, int level, StrBuilder* out) {
  if (v.list().empty()) {
    out->Append("[]");
    return absl::OkStatus();
  }
  out->Append("[");
  for (size_t i = 0; i < v.list().size(); ++i) {
    if (i) out->Append(st.item_sep);
    Newline(st, level + 1, out);
    if (absl::Status s = Dump(v.list()[i], st, level + 1, out); !s.ok()) return s;
  }
  Newline(st, level, out);
  out->Append("]");
  return absl::OkStatus();
}

absl::Status DumpDict(const Value& v, const JsonStyle& st, int level, StrBuilder* out) {
  if (v.dict().items.empty()) {
    out->Append("{}");
    return absl::OkStatus();
  }
  std::vector<const std::pair<Value, Value>*> items;
  for (const auto& kv : v.dict().items) items.push_back(&kv);
  if (st.sort_keys) {
    absl::Status err;
    std::stable_sort(items.begin(), items.end(), [&](auto* a, auto* b) {
      absl::StatusOr<int> c = Compare(a->first, b->first);
      if (!c.ok()) err = c.status();
      return c.ok() && *c < 0;
    });
    if (!err.ok()) return err;
  }
  out->Append("{");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out->Append(st.item_sep);
    Newline(st, level + 1, out);
    absl::StatusOr<Str> key = KeyString(items[i]->first);
    if (!key.ok()) return key.status();
    EscapeInto(*key, out);
    out->Append(st.key_sep);
    if (absl::Status s = Dump(items[i]->second, st, level + 1, out); !s.ok()) return s;
  }
  Newline(st, level, out);
  out->Append("}");
  return absl::OkStatus();
}

absl::Status Dump(const Value& v, const JsonStyle& st, int level, StrBuilder* out) {
  if (level > kMaxJsonDepth) return absl::InvalidArgumentError("tojson: nesting too deep");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->Append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->Append(v.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      out->Append(absl::StrCat(v.as_int()));
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      out->Append(std::isnan(d)   ? "NaN"
                  : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity")
                                  : FloatRepr(d));
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      EscapeInto(v.str_data(), out);
      return absl::OkStatus();
    case Value::Kind::kList:
      return DumpList(v, st, level, out);
    case Value::Kind::kDict:
      return DumpDict(v, st, level, out);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<Str> ToJson(const Value& v, const Value& indent, const Value& separators,
                           bool sort_keys) {
  JsonStyle st;
  st.sort_keys = sort_keys;
  if (!indent.is_none() && !indent.is_undefined()) {
    st.pretty = true;
    st.item_sep = ",";  // json.dumps drops the space before a newline
    st.indent =
        indent.is_string() ? indent.str() : std::string(std::max<int64_t>(indent.as_int(), 0), ' ');
  }
  if (!separators.is_none() && !separators.is_undefined()) {
    if (!separators.is_list() || separators.list().size() != 2 ||
        !separators.list()[0].is_string() || !separators.list()[1].is_string()) {
      return absl::InvalidArgumentError("separators must be an (item, key) pair of strings");
    }
    st.item_sep = separators.list()[0].str();
    st.key_sep = separators.list()[1].str();
  }
  StrBuilder out;
  if (absl::Status s = Dump(v, st, 0, &out); !s.ok()) return s;
  return out.Take();
}

}  // namespace dq::jinja
