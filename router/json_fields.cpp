#include "router/json_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "router/utf8.h"

namespace dq::router {
namespace {

// Integral doubles at or past 2^63 do not fit an int64; compare against the bound as a double.
constexpr double kTwoPow63 = 9223372036854775808.0;

bool InRange(double v, const FieldReader::Range& r) {
  const bool above_lo = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below_hi = r.hi_open ? v < r.hi : v <= r.hi;
  return above_lo && below_hi;
}

}  // namespace

std::string_view JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

std::string JsonPreview(const nlohmann::json& value) {
  constexpr size_t kMax = 60;
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() <= kMax) return s;
  // Cut on a character boundary so the message itself stays valid UTF-8.
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(s.substr(0, cut), "...");
}

ApiError WrongType(const std::string& param, std::string_view expected, const nlohmann::json& got) {
  return InvalidRequest(
      param, absl::StrCat("Invalid type for '", param, "': expected ", std::string(expected),
                          ", but got ", std::string(JsonTypeName(got)), " instead."));
}

ApiError BadValue(const std::string& param, std::string_view what, const nlohmann::json& got) {
  return InvalidRequest(param, absl::StrCat("Invalid '", param, "': expected ", std::string(what),
                                            ", but got ", JsonPreview(got), " instead."));
}

ApiError MissingField(const std::string& param) {
  return InvalidRequest(param, absl::StrCat("Missing required parameter: '", param, "'."));
}

ApiError InvalidUtf8(const std::string& param, std::string_view bytes) {
  Utf8Problem p;
  IsValidUtf8(bytes, &p);
  return InvalidRequest(
      param, absl::StrCat("'", param, "' is not valid UTF-8 (", std::string(p.what), " at byte ",
                          p.offset, "). Send all text as UTF-8."));
}

FieldReader::FieldReader(const nlohmann::json& object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {}

const nlohmann::json* FieldReader::Find(std::string_view name) const {
  if (looked_up_.find(name) == looked_up_.end()) looked_up_.emplace(name);
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void FieldReader::RejectUnread(std::span<const std::string_view> ignored) {
  if (!ok() || !object_.is_object()) return;
  for (const auto& [key, value] : object_.items()) {
    if (value.is_null() || looked_up_.find(key) != looked_up_.end()) continue;  // null: unset
    if (std::find(ignored.begin(), ignored.end(), std::string_view(key)) != ignored.end()) {
      continue;
    }
    return Fail(InvalidRequest(
        Param(key), absl::StrCat("Unrecognized request argument supplied: ", Param(key),
                                 ". This server does not know it; check its spelling or remove "
                                 "it (docs/serving.md lists the parameters).")));
  }
}

void FieldReader::Fail(ApiError error) {
  if (!error_) error_ = std::move(error);
}

bool FieldReader::Bool(std::string_view name, bool* out) {
  const nlohmann::json* v = ok() ? Find(name) : nullptr;
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    Fail(WrongType(Param(name), "a boolean", *v));
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool FieldReader::String(std::string_view name, std::string* out) {
  const nlohmann::json* v = ok() ? Find(name) : nullptr;
  if (v == nullptr) return false;
  if (!v->is_string()) {
    Fail(WrongType(Param(name), "a string", *v));
    return false;
  }
  const std::string& s = v->get_ref<const std::string&>();
  if (!IsValidUtf8(s)) {
    Fail(InvalidUtf8(Param(name), s));
    return false;
  }
  *out = s;
  return true;
}

bool FieldReader::Int(std::string_view name, int64_t lo, int64_t hi, int* out) {
  const nlohmann::json* v = ok() ? Find(name) : nullptr;
  if (v == nullptr) return false;
  const bool integral_float =
      v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>();
  if (!v->is_number_integer() && !integral_float) {
    Fail(WrongType(Param(name), "an integer", *v));
    return false;
  }
  bool in_range = false;
  int64_t value = 0;
  if (v->is_number_unsigned()) {
    in_range = v->get<uint64_t>() <= static_cast<uint64_t>(hi);
    value = in_range ? static_cast<int64_t>(v->get<uint64_t>()) : 0;
  } else if (integral_float) {
    const double d = v->get<double>();
    in_range = d >= static_cast<double>(lo) && d <= static_cast<double>(hi);
    value = in_range ? static_cast<int64_t>(d) : 0;
  } else {
    value = v->get<int64_t>();
    in_range = true;
  }
  if (!in_range || value < lo || value > hi) {
    Fail(BadValue(Param(name), absl::StrCat("an integer in [", lo, ", ", hi, "]"), *v));
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

bool FieldReader::Float(std::string_view name, const Range& range, float* out) {
  const nlohmann::json* v = ok() ? Find(name) : nullptr;
  if (v == nullptr) return false;
  if (!v->is_number()) {
    Fail(WrongType(Param(name), "a number", *v));
    return false;
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || !InRange(d, range)) {
    Fail(BadValue(Param(name), absl::StrCat("a number in ", std::string(range.text)), *v));
    return false;
  }
  *out = static_cast<float>(d);
  return true;
}

bool FieldReader::Seed(std::string_view name, uint64_t* out) {
  const nlohmann::json* v = ok() ? Find(name) : nullptr;
  if (v == nullptr) return false;
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
    return true;
  }
  if (v->is_number_integer()) {
    *out = static_cast<uint64_t>(v->get<int64_t>());
    return true;
  }
  const bool integral_float = v->is_number_float() &&
                              std::trunc(v->get<double>()) == v->get<double>() &&
                              std::abs(v->get<double>()) < kTwoPow63;
  if (integral_float) {
    *out = static_cast<uint64_t>(static_cast<int64_t>(v->get<double>()));
    return true;
  }
  if (v->is_number_float()) {
    Fail(BadValue(Param(name), "an integer in [-2^63, 2^64-1]", *v));
  } else {
    Fail(WrongType(Param(name), "an integer", *v));
  }
  return false;
}

}  // namespace dq::router
