// Errors of the OpenAI-compatible API. An ApiError is everything a client sees: the HTTP status
// and OpenAI's body {"error": {"message", "type", "param", "code"}}. Messages say what was wrong
// and what to do, because the client, not an operator, has to fix the request.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "absl/status/status.h"

namespace dq::router {

struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field, e.g. "messages[1].role"; empty renders as null
  std::string code;   // e.g. "invalid_api_key"; empty renders as null

  // {"error":{"message":...,"type":...,"param":...,"code":...}}
  std::string ToJson() const;
};

// A 400 invalid_request_error about `param`.
ApiError InvalidRequest(std::string param, std::string message, std::string code = "");

// The HTTP status and OpenAI error type for a Status from another room (a worker, the
// tokenizer): InvalidArgument -> 400, NotFound -> 404, ResourceExhausted -> 429,
// Unavailable -> 503, DeadlineExceeded -> 504, Cancelled -> 499, anything else -> 500.
// The Status's message becomes the error's message.
ApiError FromStatus(const absl::Status& status);

// A value or the ApiError that stopped it (std::expected is C++23).
template <typename T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::in_place_index<0>, std::move(value)) {}         // NOLINT
  ApiResult(ApiError error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  const T& value() const& { return std::get<0>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  const T* operator->() const { return &value(); }
  // Only when !ok().
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace dq::router
