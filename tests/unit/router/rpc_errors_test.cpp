#include "router/rpc_errors.h"

#include <gtest/gtest.h>

#include <set>

#include "router/worker_requests.h"

namespace dq::router {
namespace {

TEST(WorkerCallErrorTest, MapsWorkerStatusesToWhatTheClientShouldDo) {
  struct Case {
    grpc::StatusCode code;
    int http;
    const char* type;
    const char* code_name;
  };
  // A worker's failure is never the client's: no 499, no invalid_request_error (which the OpenAI
  // SDK does not retry), except for what the request itself got wrong.
  const Case cases[] = {
      {grpc::StatusCode::UNAVAILABLE, 503, "server_error", "worker_unavailable"},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, 503, "server_error", "worker_overloaded"},
      {grpc::StatusCode::DEADLINE_EXCEEDED, 504, "server_error", "timeout"},
      {grpc::StatusCode::INVALID_ARGUMENT, 400, "invalid_request_error", ""},
      {grpc::StatusCode::CANCELLED, 502, "server_error", "worker_cancelled"},
      {grpc::StatusCode::INTERNAL, 502, "server_error", "worker_error"},
      {grpc::StatusCode::FAILED_PRECONDITION, 502, "server_error", "worker_error"},
  };
  for (const Case& c : cases) {
    const ApiError e = WorkerCallError("prefill worker p:1 failed", grpc::Status(c.code, "boom"));
    EXPECT_EQ(e.http_status, c.http) << c.code;
    EXPECT_EQ(e.type, c.type) << c.code;
    EXPECT_EQ(e.code, c.code_name) << c.code;
    EXPECT_NE(e.message.find("prefill worker p:1 failed"), std::string::npos) << e.message;
    EXPECT_NE(e.message.find("boom"), std::string::npos) << e.message;
  }
}

TEST(ToGrpcStatusTest, MapsHttpStatusesToGrpcCodesKeepingTheMessage) {
  EXPECT_EQ(ToGrpcStatus(InvalidRequest("x", "bad x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(InvalidRequest("x", "bad x")).error_message(), "bad x");
  EXPECT_EQ(ToGrpcStatus(ApiError{401, "", "no key", "", ""}).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ToGrpcStatus(ApiError{404, "", "", "", ""}).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(ApiError{429, "", "", "", ""}).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(ServiceUnavailable("none")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(ToGrpcStatus(ApiError{504, "", "", "", ""}).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(ToGrpcStatus(ApiError{502, "", "", "", ""}).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(FromGrpcStatusTest, KeepsCodeAndMessage) {
  const absl::Status s = FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "gone");
}

TEST(ToWireSamplingTest, CarriesEverythingButStopStringsAndAlwaysASeed) {
  SamplingOptions s;
  s.temperature = 0.7f;
  s.top_k = 40;
  s.stop = {"###"};
  s.stop_token_ids = {7, 9};
  s.ignore_eos = true;
  const dqserve::v1::SamplingParams p = ToWireSampling(
      s, WireSamplingOptions{.max_tokens = 12, .seed = 99, .logprobs = true, .top_logprobs = 3});
  EXPECT_FLOAT_EQ(p.temperature(), 0.7f);
  EXPECT_EQ(p.top_k(), 40);
  EXPECT_EQ(p.stop_size(), 0);  // the router checks stop strings itself
  EXPECT_EQ(p.stop_token_ids_size(), 2);
  EXPECT_TRUE(p.has_seed());
  EXPECT_EQ(p.seed(), 99u);
  EXPECT_EQ(p.max_tokens(), 12u);
  EXPECT_TRUE(p.logprobs());
  EXPECT_EQ(p.top_logprobs(), 3u);
  EXPECT_TRUE(p.ignore_eos());
  const dqserve::v1::SamplingParams q = ToWireSampling(s, WireSamplingOptions{.top_logprobs = 3});
  EXPECT_EQ(q.top_logprobs(), 0u);  // alternatives only with logprobs
}

TEST(SeedForTest, KeepsTheClientsSeedAndDrawsAFreshOneOtherwise) {
  SamplingOptions s;
  s.seed = 1234;
  EXPECT_EQ(SeedFor(s), 1234u);
  s.seed.reset();
  std::set<uint64_t> drawn;
  for (int i = 0; i < 8; ++i) drawn.insert(SeedFor(s));
  EXPECT_EQ(drawn.size(), 8u);
}

// The reason travels as the status's details, whatever the message says.
TEST(FailureReasonTest, ComesFromTheDetailsNotTheMessage) {
  dqserve::v1::WorkerFailure f;
  f.set_reason(dqserve::v1::FAILURE_REASON_KV_TRANSFER);
  EXPECT_EQ(
      FailureReasonOf(grpc::Status(grpc::StatusCode::UNAVAILABLE, "boom", f.SerializeAsString())),
      dqserve::v1::FAILURE_REASON_KV_TRANSFER);
  EXPECT_EQ(FailureReasonOf(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                         "kvtransfer tcp: lease region transport reset")),
            dqserve::v1::FAILURE_REASON_UNSPECIFIED);
  EXPECT_EQ(FailureReasonOf(grpc::Status(grpc::StatusCode::INTERNAL, "x", "not a proto \xff")),
            dqserve::v1::FAILURE_REASON_UNSPECIFIED);
}

TEST(DeadlineTest, UnixMsIsAboutNowPlusTheRemainingTime) {
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t ms = ToUnixMs(SchedulerClock::now() + std::chrono::seconds(10));
  EXPECT_NEAR(static_cast<double>(ms - now_ms), 10000.0, 200.0);
}

}  // namespace
}  // namespace dq::router
