// Error mapping at the router's two wire boundaries: a worker's gRPC status becomes the
// ApiError an HTTP client sees (naming the worker and what to do), and an ApiError becomes the
// gRPC status a DqServe client sees.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "dqserve/v1/worker.pb.h"
#include "router/api_error.h"

namespace dq::router {

// The same code and message as an absl::Status (gRPC and absl share the canonical codes).
absl::Status FromGrpcStatus(const grpc::Status& status);

// Why a worker's call failed, from the status's details (worker_common/worker_status.h);
// FAILURE_REASON_UNSPECIFIED when it sent none.
dqserve::v1::FailureReason FailureReasonOf(const grpc::Status& status);

// What the client sees when a call to a worker failed. `what` says which step failed, e.g.
// "prefill worker 10.0.0.2:7001 failed". Type server_error for every 5xx, with a code:
// Unavailable -> 503 worker_unavailable (retry later); ResourceExhausted -> 503
// worker_overloaded (out of KV memory: retry later); DeadlineExceeded -> 504 timeout;
// Cancelled (by the worker: the router's own cancels never get here) -> 502 worker_cancelled;
// anything else -> 502 worker_error (a worker misbehaved, not the client). InvalidArgument /
// OutOfRange -> 400 invalid_request_error (the request cannot be served as given).
ApiError WorkerCallError(std::string_view what, const grpc::Status& status);

// 503 service_unavailable with `message` (no live worker of a role, router shutting down).
ApiError ServiceUnavailable(std::string message);

// The gRPC status for an ApiError: 400 -> INVALID_ARGUMENT, 401 -> UNAUTHENTICATED,
// 404 -> NOT_FOUND, 409 -> ALREADY_EXISTS, 413 -> INVALID_ARGUMENT, 429 -> RESOURCE_EXHAUSTED,
// 499 -> CANCELLED, 503 -> UNAVAILABLE, 504 / 408 -> DEADLINE_EXCEEDED, else INTERNAL.
grpc::Status ToGrpcStatus(const ApiError& error);

}  // namespace dq::router
