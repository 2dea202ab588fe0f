// The deployment's worker credential (common/worker_key.h) against real processes: with
// DQ_WORKER_KEY set on all three, the router's calls carry it (the deployment serves), and every
// RPC of both workers refuses a caller without it or with another key (UNAUTHENTICATED) before
// it reserves, computes or frees anything.
#include "dqserve/v1/worker.grpc.pb.h"
#include "tests/integration/deployment.h"

namespace {

using namespace dq::integration;  // NOLINT: test-local helpers

constexpr char kKey[] = "0123456789abcdef0123456789abcdef";

class WorkerAuthTest : public DeploymentSuite<WorkerAuthTest> {
 public:
  static DeploymentOptions Options() {
    DeploymentOptions o{TinyModel(), "", {}};
    o.worker_key = kKey;
    return o;
  }

 protected:
  static std::shared_ptr<grpc::Channel> Channel(int port) {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                               grpc::InsecureChannelCredentials());
  }
  // A call context with `bearer` as its authorization ("" : none).
  static std::unique_ptr<grpc::ClientContext> Context(const std::string& bearer) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!bearer.empty()) ctx->AddMetadata("authorization", bearer);
    return ctx;
  }
};

TEST_F(WorkerAuthTest, TheRouterCallsWithTheKeyAndServes) {
  const Stream s = Generate(deployment_->stub(), PromptRequest("hello", 3));
  ASSERT_TRUE(WellFormed(s));
  EXPECT_GT(s.last().usage().completion_tokens(), 0u);
}

TEST_F(WorkerAuthTest, EveryWorkerRpcRefusesACallerWithoutTheKey) {
  auto decode = v1::DecodeWorker::NewStub(Channel(deployment_->decode_port()));
  auto prefill = v1::PrefillWorker::NewStub(Channel(deployment_->prefill_port()));
  int judged = 0;
  for (const std::string bearer :
       {std::string(), std::string("Bearer wrong-key"), std::string("Bearer ") + kKey + "x"}) {
    auto expect_refused = [&](const grpc::Status& s, const char* rpc) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << rpc << " with '" << bearer << "': " << s.error_message();
      ++judged;
    };
    v1::KvLease lease;
    v1::ReserveRequest reserve;
    reserve.set_request_id("intruder");
    reserve.set_num_tokens(8);
    reserve.add_transports("tcp");
    expect_refused(decode->Reserve(Context(bearer).get(), reserve, &lease), "Reserve");
    v1::ReleaseRequest release;
    release.set_request_id("anyone");
    v1::ReleaseResponse released;
    expect_refused(decode->Release(Context(bearer).get(), release, &released), "Release");
    v1::AbortRequest abort;
    abort.set_request_id("anyone");
    v1::AbortResponse aborted;
    expect_refused(decode->Abort(Context(bearer).get(), abort, &aborted), "Abort");
    v1::HandshakeResponse hs;
    expect_refused(decode->Handshake(Context(bearer).get(), v1::HandshakeRequest(), &hs),
                   "decode Handshake");
    v1::WorkerHealthResponse health;
    expect_refused(decode->Health(Context(bearer).get(), v1::WorkerHealthRequest(), &health),
                   "decode Health");
    v1::DecodeRequest dr;
    dr.set_request_id("intruder");
    auto ctx = Context(bearer);
    auto stream = decode->Decode(ctx.get(), dr);
    v1::DecodeResponse out;
    while (stream->Read(&out)) {
    }
    expect_refused(stream->Finish(), "Decode");
    v1::PrefillRequest pr;
    pr.set_request_id("intruder");
    pr.add_prompt_token_ids(1);
    v1::PrefillResponse pres;
    expect_refused(prefill->Prefill(Context(bearer).get(), pr, &pres), "Prefill");
    expect_refused(prefill->Handshake(Context(bearer).get(), v1::HandshakeRequest(), &hs),
                   "prefill Handshake");
    expect_refused(prefill->Health(Context(bearer).get(), v1::WorkerHealthRequest(), &health),
                   "prefill Health");
  }
  EXPECT_EQ(judged, 27);
  // The right key gets through (Health answers).
  v1::WorkerHealthResponse health;
  const grpc::Status s = decode->Health(Context(std::string("Bearer ") + kKey).get(),
                                        v1::WorkerHealthRequest(), &health);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(health.open_leases(), 0u);  // no refused Reserve left a lease behind
}

}  // namespace
