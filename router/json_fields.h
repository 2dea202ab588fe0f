// Typed reads of request fields with OpenAI-style errors. Internal to the router's API layer.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"
#include "router/api_error.h"

namespace dq::router {

// "a string", "an integer", "a number", "a boolean", "an array", "an object" or "null".
std::string_view JsonTypeName(const nlohmann::json& value);

// The value as compact JSON, cut to about 60 bytes, for quoting in messages.
std::string JsonPreview(const nlohmann::json& value);

// "Invalid type for 'param': expected <expected>, but got <type> instead."
ApiError WrongType(const std::string& param, std::string_view expected, const nlohmann::json& got);

// "Invalid 'param': expected <what>, but got <value> instead."
ApiError BadValue(const std::string& param, std::string_view what, const nlohmann::json& got);

// "Missing required parameter: 'param'."
ApiError MissingField(const std::string& param);

// "'param' is not valid UTF-8 (<why> at byte N). Send text as UTF-8."
ApiError InvalidUtf8(const std::string& param, std::string_view bytes);

// Reads the optional fields of one JSON object. Absent and null fields are "unset" (OpenAI's
// own clients send explicit nulls). A wrong type or out-of-range value becomes the reader's
// error; the first error sticks and later reads do nothing, so a parser reads every field in
// a row and checks ok() once. Each read returns true only when it stored a value.
class FieldReader {
 public:
  // `object` (a JSON object) must outlive the reader. `prefix` starts every param name, e.g.
  // "stream_options." or "messages[2].".
  explicit FieldReader(const nlohmann::json& object, std::string prefix = "");

  // The field, or nullptr when it is absent or null.
  const nlohmann::json* Find(std::string_view name) const;
  // prefix + name: the param of an error about that field.
  std::string Param(std::string_view name) const { return prefix_ + std::string(name); }

  bool Bool(std::string_view name, bool* out);
  // Also checks that the text is valid UTF-8.
  bool String(std::string_view name, std::string* out);
  // An integer in [lo, hi]. A float with an integral value (16.0 from a Python client) counts.
  bool Int(std::string_view name, int64_t lo, int64_t hi, int* out);
  // A number in the range, each bound open or closed; `range` is how messages print it.
  struct Range {
    double lo;
    double hi;
    bool lo_open = false;
    bool hi_open = false;
    std::string_view text;  // e.g. "[0, 2]" or "(0, 1]"
  };
  bool Float(std::string_view name, const Range& range, float* out);
  // Any JSON integer from -2^63 to 2^64-1, negative ones as their two's-complement bits.
  bool Seed(std::string_view name, uint64_t* out);

  // Fails (400, as OpenAI's "Unrecognized request argument supplied") on the first field of the
  // object that no read above looked up and that is not in `ignored` (fields other clients send
  // that change nothing here). A misspelt or unsupported parameter then never does something
  // other than asked.
  void RejectUnread(std::span<const std::string_view> ignored);

  // Records `error` unless an earlier one is already recorded.
  void Fail(ApiError error);
  bool ok() const { return !error_.has_value(); }
  const ApiError& error() const { return *error_; }

 private:
  const nlohmann::json& object_;
  std::string prefix_;
  std::optional<ApiError> error_;
  mutable std::set<std::string, std::less<>> looked_up_;  // every name Find was asked for
};

}  // namespace dq::router
