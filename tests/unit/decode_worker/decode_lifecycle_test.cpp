// Leases and requests that end early: missing KV, ttl reclaim, release, cancel and abort, and
// the handshake / health answers.
#include <gmock/gmock.h>

#include <thread>

#include "tests/unit/decode_worker/decode_worker_fixture.h"

namespace dq::decode::testing {
namespace {

using ::testing::HasSubstr;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST_F(DecodeWorkerTest, UnknownLeaseFailsWithoutRecompute) {
  v1::KvCommit commit;
  commit.set_lease_id("lease-12345");
  commit.set_num_tokens(5);
  commit.set_first_token(7);
  const StreamResult got = Decode("ghost", commit, Greedy(4));
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(got.status.error_message(), HasSubstr("KV for lease lease-12345 is missing"));
  EXPECT_THAT(got.status.error_message(), HasSubstr("never recomputes"));
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_EQ(server_->batcher().steps(), 0);  // no forward pass ran
}

TEST_F(DecodeWorkerTest, ExpiredLeaseIsReclaimedAndItsDecodeFails) {
  const auto prompt = Prompt("this lease will expire before anyone commits it");
  // The deadline caps the ttl at ~150 ms; the reaper runs every 20 ms.
  auto lease = Reserve("expires", prompt.size(), 32, UnixMs() + 150);
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_LE(lease->ttl_ms(), 150u);
  EXPECT_LT(server_->leases().stats().free_blocks, free_at_start_);
  EXPECT_GT(server_->regions().num_regions(), 0);
  ASSERT_TRUE(
      WaitUntil([&] { return server_->leases().stats().free_blocks == free_at_start_; }, 2000));
  EXPECT_EQ(server_->regions().num_regions(), 0);
  EXPECT_EQ(server_->leases().stats().reclaimed_total, 1);
  v1::KvCommit commit;
  commit.set_lease_id(lease->lease_id());
  commit.set_num_tokens(static_cast<uint32_t>(prompt.size()));
  commit.set_first_token(5);
  const StreamResult got = Decode("expires", commit, Greedy(4));
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(got.status.error_message(), HasSubstr("expired"));
  EXPECT_THAT(got.status.error_message(), HasSubstr("never recomputes"));
}

TEST_F(DecodeWorkerTest, LeaseRegionsCoverThePromptBlocksOnly) {
  const auto prompt = Prompt("0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20");
  ASSERT_GT(prompt.size(), 16u);
  auto reserved = Reserve("regions", prompt.size(), 100);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  // One part, the target's (this worker drafts with no self or DFlash drafter).
  ASSERT_EQ(reserved->parts_size(), 1);
  ASSERT_TRUE(worker::CheckLeaseParts(*reserved).ok()) << worker::CheckLeaseParts(*reserved);
  const v1::StatePart* lease = &reserved->parts(0);
  EXPECT_EQ(lease->role(), v1::STATE_PART_ROLE_TARGET);
  const int block_size = static_cast<int>(lease->kv_layout().block_size());
  const int prompt_blocks = (static_cast<int>(prompt.size()) + block_size - 1) / block_size;
  int leased = 0;
  for (const auto& run : lease->blocks()) leased += static_cast<int>(run.count());
  EXPECT_EQ(leased, (static_cast<int>(prompt.size()) + 100 + block_size - 1) / block_size);
  EXPECT_EQ(lease->endpoint().transport(), "tcp");
  const int layers = static_cast<int>(lease->kv_layout().num_layers());
  int covered = 0;
  for (const auto& r : lease->endpoint().regions()) {
    EXPECT_EQ(r.num_layers(), 1u);
    if (r.tensor() == v1::KV_TENSOR_KEY && r.first_layer() == 0) covered += r.num_blocks();
  }
  EXPECT_EQ(covered, prompt_blocks);
  EXPECT_EQ(lease->endpoint().regions_size(), 2 * layers * lease->blocks_size());
  v1::ReleaseRequest rel;
  rel.set_lease_id(reserved->lease_id());
  rel.set_reason("test done");
  v1::ReleaseResponse out;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Release(&ctx, rel, &out).ok());
  EXPECT_TRUE(out.found());
  grpc::ClientContext again;
  ASSERT_TRUE(stub_->Release(&again, rel, &out).ok());
  EXPECT_FALSE(out.found());
}

TEST_F(DecodeWorkerTest, ReserveRefusesWhatItCannotServe) {
  v1::ReserveRequest r;
  r.set_request_id("ucx-only");
  r.set_num_tokens(10);
  r.add_transports("ucx");
  v1::KvLease lease;
  grpc::ClientContext c1;
  grpc::Status s = stub_->Reserve(&c1, r, &lease);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("\"tcp\""));
  // More tokens than the pool holds (2048) but inside the context (4096).
  auto big = Reserve("too-big", 3000, 1000);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("free"));
  auto over_context = Reserve("over-context", 5000, 1);
  EXPECT_EQ(over_context.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DecodeWorkerTest, ClientCancelMidStreamFreesBlocks) {
  const auto prompt = Prompt("a long answer that the client abandons");
  auto lease = Reserve("cancel-me", prompt.size(), 2000);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const v1::KvCommit commit = Prefill(*lease, prompt, Greedy(2000));
  const StreamResult got =
      Decode("cancel-me", commit, Greedy(2000), [](int responses) { return responses >= 3; });
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_FALSE(got.finished);
  EXPECT_LT(got.tokens.size(), 2000u);
  ASSERT_TRUE(
      WaitUntil([&] { return server_->leases().stats().free_blocks == free_at_start_; }, 2000));
  EXPECT_EQ(server_->batcher().running(), 0);
}

TEST_F(DecodeWorkerTest, AbortEndsTheStreamAndFreesBlocks) {
  const auto prompt = Prompt("abort this one");
  auto lease = Reserve("abort-me", prompt.size(), 2000);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const v1::KvCommit commit = Prefill(*lease, prompt, Greedy(2000));
  bool aborted = false;
  const StreamResult got = Decode("abort-me", commit, Greedy(2000), [&](int responses) {
    if (responses == 2) {
      v1::AbortRequest a;
      a.set_request_id("abort-me");
      v1::AbortResponse out;
      grpc::ClientContext ctx;
      EXPECT_TRUE(stub_->Abort(&ctx, a, &out).ok());
      aborted = out.found();
    }
    return false;
  });
  EXPECT_TRUE(aborted);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.reason, v1::FINISH_REASON_ABORT);
  EXPECT_LT(got.tokens.size(), 2000u);
  // Aborting an uncommitted lease releases it; an unknown request is not found.
  auto pending = Reserve("abort-pending", prompt.size(), 4);
  ASSERT_TRUE(pending.ok());
  for (const auto& [id, found] : {std::pair{"abort-pending", true}, {"nobody", false}}) {
    v1::AbortRequest a;
    a.set_request_id(id);
    v1::AbortResponse out;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Abort(&ctx, a, &out).ok());
    EXPECT_EQ(out.found(), found) << id;
  }
}

TEST_F(DecodeWorkerTest, DeadlineAbortsALongDecode) {
  const auto prompt = Prompt("no time for this");
  auto lease = Reserve("deadline", prompt.size(), 2000);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const v1::KvCommit commit = Prefill(*lease, prompt, Greedy(2000));
  v1::DecodeRequest req;
  req.set_request_id("deadline");
  *req.mutable_commit() = commit;
  *req.mutable_sampling() = Greedy(2000);
  req.set_deadline_unix_ms(UnixMs() + 20);
  grpc::ClientContext ctx;
  auto reader = stub_->Decode(&ctx, req);
  v1::DecodeResponse r;
  size_t tokens = 0;
  bool finished = false;
  while (reader->Read(&r)) {
    tokens += r.token_ids_size();
    if (r.finished()) {
      finished = true;
      EXPECT_EQ(r.finish_reason(), v1::FINISH_REASON_ABORT);
      EXPECT_THAT(r.error(), HasSubstr("deadline"));
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_TRUE(finished);
  EXPECT_LT(tokens, 2000u);
}

TEST_F(DecodeWorkerTest, ShutdownEndsRunningStreamsAndFreesBlocks) {
  const auto prompt = Prompt("still talking when the worker stops");
  auto lease = Reserve("shutdown", prompt.size(), 2000);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const v1::KvCommit commit = Prefill(*lease, prompt, Greedy(2000));
  StreamResult got;
  std::thread client([&] { got = Decode("shutdown", commit, Greedy(2000)); });
  ASSERT_TRUE(WaitUntil([&] { return server_->batcher().steps() > 3; }));
  const auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown(std::chrono::milliseconds(100));
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_LT(got.tokens.size(), 2000u);
  // Either the stream ended cleanly (ABORT) or gRPC cancelled it at the grace deadline.
  EXPECT_TRUE(got.reason == v1::FINISH_REASON_ABORT || !got.status.ok());
  EXPECT_EQ(server_->leases().stats().free_blocks, free_at_start_);
}

TEST_F(DecodeWorkerTest, HandshakeReportsLayoutMismatch) {
  v1::HandshakeRequest req;
  req.set_caller("test");
  v1::HandshakeResponse out;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->Handshake(&c1, req, &out).ok());
  EXPECT_EQ(out.worker().role(), "decode");
  EXPECT_EQ(out.worker().address(), server_->address());
  EXPECT_TRUE(out.kv_layout_compatible());
  ASSERT_EQ(out.worker().transports_size(), 1);
  EXPECT_EQ(out.worker().transports(0), "tcp");

  v1::KvLayout expected = out.worker().kv_layout();
  *req.mutable_expected_kv_layout() = expected;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->Handshake(&c2, req, &out).ok());
  EXPECT_TRUE(out.kv_layout_compatible()) << out.mismatch();

  expected.set_num_kv_heads(expected.num_kv_heads() + 1);
  *req.mutable_expected_kv_layout() = expected;
  grpc::ClientContext c3;
  ASSERT_TRUE(stub_->Handshake(&c3, req, &out).ok());
  EXPECT_FALSE(out.kv_layout_compatible());
  EXPECT_THAT(out.mismatch(), HasSubstr("num_kv_heads"));
}

TEST_F(DecodeWorkerTest, HealthCountsBlocksAndLeases) {
  auto lease = Reserve("health", 20, 12);
  ASSERT_TRUE(lease.ok()) << lease.status();
  v1::WorkerHealthResponse h;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Health(&ctx, v1::WorkerHealthRequest(), &h).ok());
  EXPECT_EQ(h.status(), v1::SERVING_STATUS_SERVING);
  EXPECT_EQ(h.total_kv_blocks(), 2048u / 16);
  EXPECT_EQ(h.free_kv_blocks(), h.total_kv_blocks() - 2);
  EXPECT_EQ(h.open_leases(), 1u);
  EXPECT_EQ(h.running_requests(), 0u);
  EXPECT_EQ(h.identity().role(), "decode");
  v1::ReleaseRequest rel;
  rel.set_lease_id(lease->lease_id());
  v1::ReleaseResponse out;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->Release(&c2, rel, &out).ok());
  EXPECT_TRUE(out.found());
}

}  // namespace
}  // namespace dq::decode::testing
