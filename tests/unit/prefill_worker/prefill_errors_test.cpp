// The prefill worker's refusals and failures: bad requests and leases, a dead or refusing decode
// side, deadlines; and that local KV blocks are back in the pool after each.
#include <chrono>

#include "tests/unit/prefill_worker/prefill_fixture.h"

namespace dq::prefill::testing {
namespace {

class PrefillErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    PrefillServerOptions o;
    o.token_budget = 16;
    o.io_timeout_ms = 1000;
    h_ = std::make_unique<PrefillHarness>(o);
    ASSERT_NE(h_->stub, nullptr);
    decode_ = std::make_unique<DecodeSide>(h_->kv_options(), h_->layout());
  }
  void TearDown() override {
    if (!h_ || !h_->stub) return;
    // Every failure path gives the local blocks back.
    const v1::WorkerHealthResponse health = h_->Health();
    EXPECT_EQ(health.free_kv_blocks(), health.total_kv_blocks());
    EXPECT_EQ(health.running_requests(), 0u);
    EXPECT_EQ(health.queued_requests(), 0u);
  }

  grpc::Status Run(const v1::PrefillRequest& req) {
    v1::PrefillResponse resp;
    return h_->Prefill(req, &resp);
  }

  std::unique_ptr<PrefillHarness> h_;
  std::unique_ptr<DecodeSide> decode_;
};

TEST_F(PrefillErrors, LayoutMismatchIsRefusedNamingTheField) {
  v1::KvLease lease = decode_->Lease("x", {{0, 2}});
  Target(lease).mutable_kv_layout()->set_head_dim(64);
  const grpc::Status s = Run(Request(Prompt(20), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("head_dim: expected 64, got 32"), std::string::npos)
      << s.error_message();
}

TEST_F(PrefillErrors, BadPromptsAreInvalidArguments) {
  const v1::KvLease lease = decode_->Lease("x", {{0, 2}});
  grpc::Status s = Run(Request({}, lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("empty"), std::string::npos) << s.error_message();

  s = Run(Request({5, 6, 49216}, lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("49216"), std::string::npos) << s.error_message();

  s = Run(Request(Prompt(4096), decode_->Lease("big", {{0, 256}})));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("context"), std::string::npos) << s.error_message();

  v1::PrefillRequest req = Request(Prompt(3), lease);
  req.mutable_sampling()->set_top_p(1.5f);
  s = Run(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("top_p"), std::string::npos) << s.error_message();
}

TEST_F(PrefillErrors, LeaseTooSmallOrWithoutRegionsIsRefused) {
  grpc::Status s = Run(Request(Prompt(40), decode_->Lease("small", {{0, 2}})));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("holds 2 blocks"), std::string::npos) << s.error_message();

  v1::KvLease lease = decode_->Lease("novalue", {{0, 2}});
  auto* regions = Target(lease).mutable_endpoint()->mutable_regions();
  regions->erase(regions->begin() + 1);  // layer 0's V region
  s = Run(Request(Prompt(20), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("no V region for layer 0"), std::string::npos)
      << s.error_message();

  lease = decode_->Lease("ucx", {{0, 2}});
  Target(lease).mutable_endpoint()->set_transport("nccl");
  s = Run(Request(Prompt(20), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("supports only: tcp"), std::string::npos) << s.error_message();
}

// The lease's manifest is checked before any compute: one target KV part, which is required;
// at most one part per (role, kind); only kinds this worker writes.
TEST_F(PrefillErrors, MalformedLeasePartsAreRefusedNamingThePart) {
  v1::KvLease lease = decode_->Lease("none", {{0, 2}});
  lease.clear_parts();
  grpc::Status s = Run(Request(Prompt(20), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("0 target paged KV parts"), std::string::npos)
      << s.error_message();

  lease = decode_->Lease("two", {{0, 2}});
  *lease.add_parts() = lease.parts(0);
  s = Run(Request(Prompt(20), lease));
  EXPECT_NE(s.error_message().find("repeats a (role, kind)"), std::string::npos)
      << s.error_message();

  lease = decode_->Lease("optional", {{0, 2}});
  Target(lease).set_required(false);
  s = Run(Request(Prompt(20), lease));
  EXPECT_NE(s.error_message().find("(target paged KV) must be required"), std::string::npos)
      << s.error_message();

  lease = decode_->Lease("kind", {{0, 2}});
  Target(lease).set_kind(v1::STATE_PART_KIND_UNSPECIFIED);
  s = Run(Request(Prompt(20), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("STATE_PART_KIND_STATE_SLOT parts only"), std::string::npos)
      << s.error_message();
}

// A drafter part this worker cannot fill (it runs no drafter) is skipped, not refused: the
// prompt is prefilled and the commit says, for that part, why it was not written.
TEST_F(PrefillErrors, ADrafterPartWithoutADrafterIsSkippedWithTheReason) {
  v1::KvLease lease = decode_->Lease("d", {{0, 2}});
  v1::StatePart& drafter = *lease.add_parts();
  drafter = lease.parts(0);
  drafter.set_role(v1::STATE_PART_ROLE_DRAFTER);
  drafter.set_required(false);
  drafter.set_fingerprint("int4:0123");
  v1::PrefillResponse resp;
  const grpc::Status s = h_->Prefill(Request(Prompt(20), lease), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.commit().parts_size(), 2);
  EXPECT_TRUE(worker::PartWritten(resp.commit(), v1::STATE_PART_ROLE_TARGET));
  EXPECT_FALSE(worker::PartWritten(resp.commit(), v1::STATE_PART_ROLE_DRAFTER));
  EXPECT_NE(worker::PartSkipped(resp.commit(), v1::STATE_PART_ROLE_DRAFTER).find("runs no drafter"),
            std::string::npos)
      << worker::PartSkipped(resp.commit(), v1::STATE_PART_ROLE_DRAFTER);
}

TEST_F(PrefillErrors, DeadReceiverFailsQuicklyWithUnavailable) {
  const v1::KvLease lease = decode_->Lease("dead", {{0, 4}});
  decode_->Kill();
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status s = Run(Request(Prompt(50), lease));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST_F(PrefillErrors, ReceiverThatDiesAfterAConnectionFailsTheNextRequest) {
  const v1::KvLease first = decode_->Lease("ok", {{0, 4}});
  ASSERT_TRUE(Run(Request(Prompt(50), first)).ok());
  const v1::KvLease second = decode_->Lease("late", {{4, 4}});
  decode_->Kill();  // the worker already holds a connection to it
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status s = Run(Request(Prompt(50), second));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

TEST_F(PrefillErrors, RefusedWritesFailMidPrefillWithTheTransportsError) {
  // The receiver is alive but the lease's regions are gone (expired lease): every write is
  // refused by the receiver after the worker has started computing and holds local blocks.
  const v1::KvLease lease = decode_->Lease("expired", {{0, 4}});
  decode_->ReleaseRegions();
  const grpc::Status s = Run(Request(Prompt(50), lease));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("KV transfer to the decode worker"), std::string::npos)
      << s.error_message();
}

TEST_F(PrefillErrors, DeadlineStopsALongChunkedPrefill) {
  // 3000 tokens in chunks of 16: far longer than the deadline allows.
  v1::PrefillRequest req = Request(Prompt(3000), decode_->Lease("slow", {{0, 188}}));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  req.set_deadline_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(now).count() +
                           100);
  const grpc::Status s = Run(req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
}

TEST_F(PrefillErrors, ClientCancelStopsALongChunkedPrefill) {
  const v1::PrefillRequest req = Request(Prompt(3000), decode_->Lease("cancel", {{0, 188}}));
  grpc::ClientContext ctx;
  v1::PrefillResponse resp;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ctx.TryCancel();
  });
  const grpc::Status s = h_->stub->Prefill(&ctx, req, &resp);
  canceller.join();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  // The server notices at its next chunk boundary; give it a moment before TearDown checks.
  for (int i = 0; i < 100 && h_->Health().running_requests() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(PrefillHandshake, AnswersWithIdentityAndChecksTheLayout) {
  PrefillHarness h({});
  ASSERT_NE(h.stub, nullptr);
  v1::HandshakeRequest req;
  *req.mutable_expected_kv_layout() = h.layout();
  req.set_caller("test");
  v1::HandshakeResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(h.stub->Handshake(&ctx, req, &resp).ok());
  }
  EXPECT_TRUE(resp.kv_layout_compatible());
  EXPECT_EQ(resp.worker().role(), "prefill");
  EXPECT_EQ(resp.worker().address(), h.server->address());
  ASSERT_EQ(resp.worker().transports_size(), 1);
  EXPECT_EQ(resp.worker().transports(0), "tcp");

  req.mutable_expected_kv_layout()->set_block_size(32);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(h.stub->Handshake(&ctx, req, &resp).ok());
  }
  EXPECT_FALSE(resp.kv_layout_compatible());
  EXPECT_NE(resp.mismatch().find("block_size"), std::string::npos) << resp.mismatch();

  const v1::WorkerHealthResponse health = h.Health();
  EXPECT_EQ(health.status(), v1::SERVING_STATUS_SERVING);
  EXPECT_EQ(health.total_kv_blocks(), 4096u / 16);
  EXPECT_EQ(health.identity().role(), "prefill");
}

}  // namespace
}  // namespace dq::prefill::testing
