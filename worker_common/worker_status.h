// Worker errors on the wire: the gRPC code and message of an absl::Status, plus why it failed
// (a typed v1::FailureReason carried in the status's details), so the router decides what a
// failure means (a KV transfer to one lease, not a dead worker) without reading message text.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "dqserve/v1/worker.pb.h"

namespace dq::worker {

// `s` with `reason` attached (kept through copies and ToGrpc). OK stays OK.
absl::Status WithFailureReason(absl::Status s, dqserve::v1::FailureReason reason);
// The reason attached to `s`, or FAILURE_REASON_UNSPECIFIED.
dqserve::v1::FailureReason FailureReasonOf(const absl::Status& s);

// Same code and message; the reason, when there is one, as a serialized v1::WorkerFailure in
// the gRPC status's error details.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace dq::worker
