#include "router/api_error.h"

#include "nlohmann/json.hpp"

namespace dq::router {
namespace {

nlohmann::ordered_json StringOrNull(const std::string& s) {
  return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s);
}

}  // namespace

std::string ApiError::ToJson() const {
  nlohmann::ordered_json body;
  body["error"]["message"] = message;
  body["error"]["type"] = type;
  body["error"]["param"] = StringOrNull(param);
  body["error"]["code"] = StringOrNull(code);
  // Messages quote client input; replace rather than throw if some caller let bad UTF-8 in.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError InvalidRequest(std::string param, std::string message, std::string code) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param),
                  std::move(code)};
}

ApiError FromStatus(const absl::Status& status) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "requests";
      e.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_error";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      e.http_status = 504;
      e.type = "server_error";
      e.code = "timeout";
      break;
    case absl::StatusCode::kCancelled:
      // nginx's "client closed request": the client went away, nobody reads this.
      e.http_status = 499;
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

}  // namespace dq::router
