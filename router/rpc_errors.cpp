#include "router/rpc_errors.h"

#include "absl/strings/str_cat.h"

namespace dq::router {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

dqserve::v1::FailureReason FailureReasonOf(const grpc::Status& status) {
  dqserve::v1::WorkerFailure failure;
  if (status.error_details().empty() || !failure.ParseFromString(status.error_details())) {
    return dqserve::v1::FAILURE_REASON_UNSPECIFIED;
  }
  return failure.reason();
}

ApiError WorkerCallError(std::string_view what, const grpc::Status& status) {
  // A worker's failure is the server's, whatever its code: "server_error", so that clients (the
  // OpenAI SDK retries 5xx) neither blame the request nor give up on it. The router's own
  // cancellations (client gone, Abort) never come here.
  ApiError e;
  e.type = "server_error";
  const std::string detail =
      status.error_message().empty() ? std::string("(no message)") : status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      e.http_status = 503;
      e.code = "worker_unavailable";
      e.message = absl::StrCat(std::string(what), ": the worker is unreachable (", detail,
                               "). Retry shortly; the router routes around dead workers.");
      return e;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      e.http_status = 503;
      e.code = "worker_overloaded";
      e.message = absl::StrCat(std::string(what), ": the worker is out of capacity (", detail,
                               "). Retry later or send a shorter request.");
      return e;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      e.http_status = 504;
      e.code = "timeout";
      e.message = absl::StrCat(std::string(what), ": the request's deadline passed (", detail,
                               "). Retry with a longer timeout or fewer tokens.");
      return e;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      e.http_status = 400;
      e.type = "invalid_request_error";
      e.message = absl::StrCat(std::string(what), ": ", detail);
      return e;
    case grpc::StatusCode::CANCELLED:
      // The worker's side ended the call (shutting down, its stream broke): retry elsewhere.
      e.http_status = 502;
      e.code = "worker_cancelled";
      e.message = absl::StrCat(std::string(what), ": the worker cancelled the call (", detail,
                               "). Retry; another worker may serve it.");
      return e;
    default:
      e.http_status = 502;
      e.code = "worker_error";
      e.message = absl::StrCat(std::string(what), ": ", detail);
      return e;
  }
}

ApiError ServiceUnavailable(std::string message) {
  return ApiError{503, "service_unavailable", std::move(message), "", ""};
}

grpc::Status ToGrpcStatus(const ApiError& error) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (error.http_status) {
    case 400:
    case 413:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case 401:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case 404:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case 409:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case 429:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case 499:
      code = grpc::StatusCode::CANCELLED;
      break;
    case 503:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case 408:
    case 504:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    default:
      break;
  }
  return grpc::Status(code, error.message);
}

}  // namespace dq::router
