#include "worker_common/worker_status.h"

#include <gtest/gtest.h>

namespace dq::worker {
namespace {

namespace v1 = dqserve::v1;

TEST(WorkerStatusTest, AReasonTravelsInTheGrpcDetailsWithCodeAndMessage) {
  const absl::Status s =
      WithFailureReason(absl::UnavailableError("peer reset"), v1::FAILURE_REASON_KV_TRANSFER);
  EXPECT_EQ(FailureReasonOf(s), v1::FAILURE_REASON_KV_TRANSFER);
  const grpc::Status g = ToGrpc(s);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(g.error_message(), "peer reset");
  v1::WorkerFailure f;
  ASSERT_TRUE(f.ParseFromString(g.error_details()));
  EXPECT_EQ(f.reason(), v1::FAILURE_REASON_KV_TRANSFER);
}

TEST(WorkerStatusTest, WithoutAReasonThereAreNoDetails) {
  const grpc::Status g = ToGrpc(absl::InvalidArgumentError("bad prompt"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(g.error_details().empty());
  EXPECT_EQ(FailureReasonOf(absl::InternalError("x")), v1::FAILURE_REASON_UNSPECIFIED);
  EXPECT_TRUE(ToGrpc(WithFailureReason(absl::OkStatus(), v1::FAILURE_REASON_KV_TRANSFER)).ok());
}

}  // namespace
}  // namespace dq::worker
