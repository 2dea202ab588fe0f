// The router streams the first token from the prefill's commit and skips the decode worker's
// repeat of it (worker.proto: the decode stream starts with the commit's first token). With
// in-process gRPC fakes of both workers: a stream that starts with the committed token is
// streamed once, token for token; one that starts with another token ends the request with a
// 502 that says the workers disagree, instead of a wrong answer. And the lease rule
// (router/decode_lease.h): a request that ends on its first token never calls Decode and
// releases its lease; one whose Decode stream fails before any response releases it too; one the
// worker took is never released by the router.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dqserve/v1/worker.grpc.pb.h"
#include "router/request_pipeline.h"
#include "tests/unit/router/loopback_pipeline.h"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;
using std::chrono::milliseconds;

constexpr int32_t kFirst = 5;  // the token the prefill worker commits

class FakePrefill final : public v1::PrefillWorker::Service {
 public:
  grpc::Status fail = grpc::Status::OK;  // what Prefill answers instead of a commit

 private:
  grpc::Status Prefill(grpc::ServerContext*, const v1::PrefillRequest* r,
                       v1::PrefillResponse* out) override {
    if (!fail.ok()) return fail;
    out->set_request_id(r->request_id());
    v1::KvCommit* c = out->mutable_commit();
    c->set_lease_id(r->lease().lease_id());
    c->set_num_tokens(static_cast<uint32_t>(r->prompt_token_ids_size()));
    c->set_first_token(kFirst);
    return grpc::Status::OK;
  }
};

// Streams `head` as the request's tokens, then finishes at the length limit; with
// `fail_before_response`, fails the call before writing anything. Records the lease calls.
class FakeDecode final : public v1::DecodeWorker::Service {
 public:
  std::vector<int32_t> head;
  bool fail_before_response = false;
  grpc::Status fail = grpc::Status(grpc::StatusCode::INTERNAL, "engine failed");
  std::atomic<bool> healthy{true};  // what Health answers
  std::atomic<int> decode_calls{0};
  std::mutex mu;
  std::vector<std::string> released;  // lease ids (or "request:<id>") the router released

 private:
  grpc::Status Reserve(grpc::ServerContext*, const v1::ReserveRequest* r,
                       v1::KvLease* out) override {
    out->set_lease_id("lease-1");
    out->set_request_id(r->request_id());
    return grpc::Status::OK;
  }
  grpc::Status Decode(grpc::ServerContext*, const v1::DecodeRequest* r,
                      grpc::ServerWriter<v1::DecodeResponse>* w) override {
    ++decode_calls;
    if (fail_before_response) return fail;
    v1::DecodeResponse resp;
    resp.set_request_id(r->request_id());
    for (int32_t t : head) resp.add_token_ids(t);
    resp.set_finished(true);
    resp.set_finish_reason(v1::FINISH_REASON_LENGTH);
    w->Write(resp);
    return grpc::Status::OK;
  }
  grpc::Status Health(grpc::ServerContext*, const v1::WorkerHealthRequest*,
                      v1::WorkerHealthResponse* out) override {
    if (!healthy) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "not serving");
    out->set_status(v1::SERVING_STATUS_SERVING);
    return grpc::Status::OK;
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* r,
                       v1::ReleaseResponse*) override {
    std::lock_guard lock(mu);
    released.push_back(r->lease_id().empty() ? "request:" + r->request_id() : r->lease_id());
    return grpc::Status::OK;
  }
};

class StreamHeadTest : public ::testing::Test {
 protected:
  StreamHeadTest() : model_(TestModel()), scheduler_(SchedulerOptions{4, 4, milliseconds(5000)}) {}

  static GenerationInput Input(std::vector<std::string> stop = {}) {
    GenerationInput in;
    in.request_id = "r";
    in.prompt_ids = {1, 2, 3};
    in.max_tokens = 3;
    in.sampling.stop = std::move(stop);
    return in;
  }

  // Runs one request through the fakes; `tokens` gets what the client was streamed.
  GenerationResult Run(std::vector<int32_t>* tokens, std::vector<std::string> stop = {}) {
    StartResult s = workers_.pipeline().Start(Input(std::move(stop)));
    EXPECT_TRUE(s.ok()) << s.error.message;
    if (!s.ok()) return {};
    return s.request->Run([&](const Delta& d) {
      tokens->insert(tokens->end(), d.token_ids.begin(), d.token_ids.end());
      return true;
    });
  }

  ServedModel model_;
  Scheduler scheduler_;
  RouterMetrics metrics_;
  FakePrefill prefill_;
  FakeDecode decode_;
  LoopbackPipeline workers_{&prefill_, &decode_, model_, scheduler_, metrics_};
};

TEST_F(StreamHeadTest, TheCommittedFirstTokenIsStreamedOnce) {
  decode_.head = {kFirst, 6, 7};
  std::vector<int32_t> tokens;
  const GenerationResult r = Run(&tokens);
  EXPECT_FALSE(r.error.has_value()) << r.error->message;
  EXPECT_EQ(tokens, (std::vector<int32_t>{kFirst, 6, 7}));
}

TEST_F(StreamHeadTest, AStreamThatStartsWithAnotherTokenIs502) {
  decode_.head = {9, 6, 7};
  std::vector<int32_t> tokens;
  const GenerationResult r = Run(&tokens);
  EXPECT_EQ(r.outcome, Outcome::kError);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->http_status, 502);
  EXPECT_NE(r.error->message.find("began with token 9, not the first token the prefill worker "
                                  "committed (5)"),
            std::string::npos)
      << r.error->message;
  EXPECT_EQ(tokens, (std::vector<int32_t>{kFirst}));  // nothing after the committed token
}

std::vector<std::string> Released(FakeDecode& d) {
  std::lock_guard lock(d.mu);
  return d.released;
}

TEST_F(StreamHeadTest, AStopStringInTheFirstTokenReleasesTheLeaseWithoutDecoding) {
  decode_.head = {kFirst, 6, 7};
  const std::vector<int32_t> ids = {kFirst};
  const std::string first = model_.tokenizer.Decode(ids);
  ASSERT_FALSE(first.empty());
  std::vector<int32_t> tokens;
  const GenerationResult r = Run(&tokens, {first});
  EXPECT_FALSE(r.error.has_value()) << r.error->message;
  EXPECT_EQ(r.outcome, Outcome::kStop);
  EXPECT_EQ(r.matched_stop, first);
  EXPECT_EQ(decode_.decode_calls.load(), 0);
  EXPECT_EQ(Released(decode_), (std::vector<std::string>{"lease-1"}));
}

TEST_F(StreamHeadTest, ADecodeCallThatFailsBeforeAnyResponseReleasesTheLease) {
  decode_.fail_before_response = true;
  std::vector<int32_t> tokens;
  const GenerationResult r = Run(&tokens);
  EXPECT_EQ(r.outcome, Outcome::kError);
  EXPECT_EQ(decode_.decode_calls.load(), 1);
  EXPECT_EQ(Released(decode_), (std::vector<std::string>{"lease-1"}));
}

TEST_F(StreamHeadTest, ALeaseTheWorkerTookIsNotReleasedByTheRouter) {
  decode_.head = {kFirst, 6, 7};
  std::vector<int32_t> tokens;
  const GenerationResult r = Run(&tokens);
  EXPECT_FALSE(r.error.has_value()) << r.error->message;
  EXPECT_EQ(decode_.decode_calls.load(), 1);
  EXPECT_TRUE(Released(decode_).empty());
}

// The worker's own status reaches the client, every time: the router does not cancel a stream the
// worker already ended (a late cancel can replace the worker's status with a local CANCELLED).
TEST_F(StreamHeadTest, TheDecodeWorkersOwnStatusIsWhatTheClientIsTold) {
  decode_.fail_before_response = true;
  decode_.fail =
      grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "KV for lease lease-1 is gone");
  for (int i = 0; i < 20; ++i) {
    std::vector<int32_t> tokens;
    const GenerationResult r = Run(&tokens);
    ASSERT_TRUE(r.error.has_value());
    EXPECT_NE(r.error->message.find("KV for lease lease-1 is gone"), std::string::npos)
        << r.error->message;
  }
  EXPECT_TRUE(workers_.registry().Pick(WorkerRole::kDecode).ok());
}

// A decode stream the worker cancels is a 502; the worker is probed at once and stays in service
// while it answers its health check, and is routed around when it does not.
TEST_F(StreamHeadTest, ACancelledDecodeStreamMarksTheWorkerDownOnlyIfItsProbeFails) {
  decode_.fail_before_response = true;
  decode_.fail = grpc::Status(grpc::StatusCode::CANCELLED, "the decode stream broke");
  std::vector<int32_t> tokens;
  GenerationResult r = Run(&tokens);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->http_status, 502);
  EXPECT_EQ(r.error->code, "worker_cancelled");
  EXPECT_TRUE(workers_.registry().Pick(WorkerRole::kDecode).ok());

  decode_.healthy = false;
  r = Run(&tokens);
  ASSERT_TRUE(r.error.has_value());
  EXPECT_EQ(r.error->http_status, 502);
  EXPECT_FALSE(workers_.registry().Pick(WorkerRole::kDecode).ok());
}

// A worker that ends the call itself is the server's failure: 5xx server_error, which clients
// retry, not the 499 invalid_request_error that blames the client.
TEST_F(StreamHeadTest, APrefillWorkerThatCancelsIsAServerErrorAndTheLeaseIsReleased) {
  prefill_.fail = grpc::Status(grpc::StatusCode::CANCELLED, "shutting down");
  const StartResult s = workers_.pipeline().Start(Input());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error.http_status, 502);
  EXPECT_EQ(s.error.type, "server_error");
  EXPECT_EQ(s.error.code, "worker_cancelled");
  EXPECT_EQ(Released(decode_), (std::vector<std::string>{"lease-1"}));
}

// A KV transfer failure (the typed reason in the status's details) is about the decode lease:
// the prefill worker that reported it stays up; the same code without the reason marks it down.
TEST_F(StreamHeadTest, ATypedKvTransferFailureDoesNotMarkThePrefillWorkerDown) {
  v1::WorkerFailure f;
  f.set_reason(v1::FAILURE_REASON_KV_TRANSFER);
  prefill_.fail = grpc::Status(grpc::StatusCode::UNAVAILABLE, "peer reset", f.SerializeAsString());
  StartResult s = workers_.pipeline().Start(Input());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error.message.find("the KV transfer from prefill worker"), std::string::npos)
      << s.error.message;
  EXPECT_EQ(metrics_.kv_transfer_failures.load(), 1u);
  EXPECT_TRUE(workers_.registry().Pick(WorkerRole::kPrefill).ok());

  prefill_.fail = grpc::Status(grpc::StatusCode::UNAVAILABLE, "KV transfer lease region");
  s = workers_.pipeline().Start(Input());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error.message.find("the KV transfer"), std::string::npos) << s.error.message;
  EXPECT_EQ(metrics_.kv_transfer_failures.load(), 1u);
  EXPECT_FALSE(workers_.registry().Pick(WorkerRole::kPrefill).ok());
}

}  // namespace
}  // namespace dq::router
