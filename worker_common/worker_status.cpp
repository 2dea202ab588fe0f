#include "worker_common/worker_status.h"

#include <string>

#include "absl/strings/cord.h"

namespace dq::worker {
namespace v1 = dqserve::v1;
namespace {

constexpr char kPayloadUrl[] = "type.googleapis.com/dqserve.v1.WorkerFailure";

}  // namespace

absl::Status WithFailureReason(absl::Status s, v1::FailureReason reason) {
  if (s.ok()) return s;
  v1::WorkerFailure failure;
  failure.set_reason(reason);
  s.SetPayload(kPayloadUrl, absl::Cord(failure.SerializeAsString()));
  return s;
}

v1::FailureReason FailureReasonOf(const absl::Status& s) {
  const auto payload = s.GetPayload(kPayloadUrl);  // absl::optional<absl::Cord>
  v1::WorkerFailure failure;
  if (!payload || !failure.ParseFromString(std::string(*payload))) {
    return v1::FAILURE_REASON_UNSPECIFIED;
  }
  return failure.reason();
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share their canonical code numbering.
  const auto code = static_cast<grpc::StatusCode>(s.code());
  const v1::FailureReason reason = FailureReasonOf(s);
  if (reason == v1::FAILURE_REASON_UNSPECIFIED) return grpc::Status(code, std::string(s.message()));
  v1::WorkerFailure failure;
  failure.set_reason(reason);
  return grpc::Status(code, std::string(s.message()), failure.SerializeAsString());
}

}  // namespace dq::worker
