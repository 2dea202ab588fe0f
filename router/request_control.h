// What the two halves of a request's path share (request_pipeline.cpp: admission, Reserve,
// Prefill; active_request.cpp: the decode stream): the cancel path of a live request and how a
// call's ending becomes the request's outcome. Private to router/.
#pragma once

#include <grpcpp/grpcpp.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "dqserve/v1/worker.pb.h"
#include "router/api_error.h"
#include "router/api_types.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"

namespace dq::router {

// The cancel path of one live request: whichever gRPC call it has in flight, and why it was
// cancelled. Shared between the request's thread and Abort / health / shutdown callers.
struct RequestControl {
  std::mutex mu;
  std::string id;
  grpc::ClientContext* call = nullptr;
  bool aborted = false;        // Abort RPC or shutdown: ends with finish_reason "abort"
  std::string worker_failure;  // a worker of this request was declared dead: ends in error
  std::string prefill_address;
  std::string decode_address;

  void SetCall(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu);
    call = ctx;
    // gRPC applies a cancel made before the call starts when it starts.
    if (aborted || !worker_failure.empty()) ctx->TryCancel();
  }
  void ClearCall() {
    std::lock_guard lock(mu);
    call = nullptr;
  }
  void Cancel(bool abort, const std::string& failure) {
    std::lock_guard lock(mu);
    if (abort) aborted = true;
    if (!failure.empty() && worker_failure.empty()) worker_failure = failure;
    if (call != nullptr) call->TryCancel();
  }
  bool is_aborted() {
    std::lock_guard lock(mu);
    return aborted;
  }
  std::string failure() {
    std::lock_guard lock(mu);
    return worker_failure;
  }
};

namespace request_detail {
namespace v1 = dqserve::v1;

inline Outcome OutcomeOf(const grpc::Status& s, bool aborted) {
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Outcome::kTimeout;
    case grpc::StatusCode::CANCELLED:
      return aborted ? Outcome::kAbort : Outcome::kError;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return Outcome::kBadRequest;
    default:
      return Outcome::kError;
  }
}

inline ApiError Aborted(const std::string& id) {
  return ApiError{499, "invalid_request_error", absl::StrCat("Request ", id, " was aborted."), "",
                  "aborted"};
}

// A worker cancels a call whose deadline it saw pass (it gets the deadline with the call), often
// before this side's timer fires: that is the request's timeout, not a worker that went away (which
// would mark a healthy worker down).
inline grpc::Status PastDeadline(grpc::Status s, SchedulerClock::time_point deadline) {
  if (s.error_code() != grpc::StatusCode::CANCELLED || SchedulerClock::now() < deadline) return s;
  return grpc::Status(
      grpc::StatusCode::DEADLINE_EXCEEDED,
      absl::StrCat("the worker ended the call at the deadline (", s.error_message(), ")"));
}

// A worker of the request was declared dead (health checks) and the router cancelled its call.
inline ApiError WorkerLost(const std::string& failure) {
  return ApiError{503, "server_error", absl::StrCat(failure, "; the request was lost. Retry."), "",
                  "worker_unavailable"};
}

inline double Seconds(SchedulerClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

inline std::string DrafterPromptName(v1::DrafterPrompt p) {
  switch (p) {
    case v1::DRAFTER_PROMPT_SHIPPED:
      return "shipped";
    case v1::DRAFTER_PROMPT_RECOMPUTED:
      return "recomputed";
    default:
      return "";
  }
}

}  // namespace request_detail
}  // namespace dq::router
