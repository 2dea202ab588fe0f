#include "router/worker_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;

v1::KvLayout Layout(uint32_t kv_heads = 8) {
  v1::KvLayout l;
  l.set_architecture("Qwen3ForCausalLM");
  l.set_num_layers(28);
  l.set_num_kv_heads(kv_heads);
  l.set_head_dim(128);
  l.set_kv_dtype("bf16");
  l.set_block_size(16);
  return l;
}

v1::HandshakeResponse Handshake(const std::string& role, const v1::KvLayout& layout,
                                const std::string& scheme) {
  v1::HandshakeResponse r;
  r.mutable_worker()->set_role(role);
  *r.mutable_worker()->mutable_kv_layout() = layout;
  r.mutable_worker()->mutable_checkpoint()->set_scheme(scheme);
  r.mutable_worker()->mutable_checkpoint()->set_path("/ckpt/" + scheme);
  r.mutable_worker()->add_transports("tcp");
  r.set_kv_layout_compatible(true);
  return r;
}

v1::WorkerHealthResponse Serving(uint32_t running, uint32_t queued,
                                 const v1::WorkerIdentity* identity = nullptr) {
  v1::WorkerHealthResponse h;
  h.set_status(v1::SERVING_STATUS_SERVING);
  h.set_running_requests(running);
  h.set_queued_requests(queued);
  if (identity) *h.mutable_identity() = *identity;
  return h;
}

WorkerStatus Live(int64_t load) {
  WorkerStatus s;
  s.handshaken = s.layout_ok = s.serving = true;
  s.running = static_cast<uint32_t>(load);
  return s;
}

TEST(PickLeastLoadedTest, PicksTheLiveWorkerWithTheLeastLoad) {
  std::vector<WorkerStatus> ws = {Live(3), Live(1), Live(2)};
  EXPECT_EQ(PickLeastLoaded(ws, 0), 1u);
  ws[1].serving = false;  // down: never picked however idle
  EXPECT_EQ(PickLeastLoaded(ws, 0), 2u);
  ws[2].router_in_flight = 5;  // the router's own calls count too
  EXPECT_EQ(PickLeastLoaded(ws, 0), 0u);
}

TEST(PickLeastLoadedTest, RotatesBetweenEquallyLoadedWorkersAndSaysWhenNoneIsLive) {
  std::vector<WorkerStatus> ws = {Live(0), Live(0), Live(0)};
  EXPECT_EQ(PickLeastLoaded(ws, 0), 0u);
  EXPECT_EQ(PickLeastLoaded(ws, 1), 1u);
  EXPECT_EQ(PickLeastLoaded(ws, 5), 2u);
  for (auto& w : ws) w.layout_ok = false;
  EXPECT_FALSE(PickLeastLoaded(ws, 0).has_value());
  EXPECT_FALSE(PickLeastLoaded(std::vector<WorkerStatus>{}, 0).has_value());
}

TEST(DescribeLayoutMismatchTest, NamesEveryDifferingFieldWithBothValues) {
  EXPECT_EQ(DescribeLayoutMismatch(Layout(), Layout()), "");
  v1::KvLayout other = Layout(4);
  other.set_kv_dtype("f32");
  const std::string m = DescribeLayoutMismatch(Layout(), other);
  EXPECT_NE(m.find("num_kv_heads: expected 8, worker has 4"), std::string::npos) << m;
  EXPECT_NE(m.find("kv_dtype: expected bf16, worker has f32"), std::string::npos) << m;
  EXPECT_EQ(m.find("head_dim"), std::string::npos) << m;
}

// The registry's state machine, driven with Handshake/Health results directly (the addresses
// are never dialled: no thread is started and no probe is sent).
class WorkerRegistryTest : public ::testing::Test {
 protected:
  WorkerRegistryTest() : registry_(Options()) {}
  static WorkerRegistryOptions Options() {
    WorkerRegistryOptions o;
    o.prefill_addresses = {"p0:1", "p1:1"};
    o.decode_addresses = {"d0:1", "d1:1"};
    o.failures_to_cancel_requests = 3;
    return o;
  }
  void BringUpDecode(size_t i, uint32_t running = 0) {
    registry_.ApplyHandshake(WorkerRole::kDecode, i, Handshake("decode", Layout(), "int4"),
                             registry_.reference_layout());
    registry_.ApplyHealth(WorkerRole::kDecode, i, Serving(running, 0));
  }
  void BringUpPrefill(size_t i, const v1::KvLayout& layout, uint32_t running = 0) {
    registry_.ApplyHandshake(WorkerRole::kPrefill, i, Handshake("prefill", layout, "fp8"),
                             registry_.reference_layout());
    registry_.ApplyHealth(WorkerRole::kPrefill, i, Serving(running, 0));
  }
  WorkerRegistry registry_;
};

TEST_F(WorkerRegistryTest, NothingIsLiveBeforeHandshakeAndHealth) {
  EXPECT_FALSE(registry_.Ready());
  ApiResult<WorkerHandle> h = registry_.Pick(WorkerRole::kDecode);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().http_status, 503);
  EXPECT_EQ(h.error().type, "service_unavailable");
  EXPECT_NE(h.error().message.find("No live decode worker"), std::string::npos);
  EXPECT_NE(h.error().message.find("d0:1"), std::string::npos);
}

TEST_F(WorkerRegistryTest, FirstDecodeLayoutIsTheReferenceAndAMismatchedPrefillIsRefused) {
  BringUpDecode(0);
  ASSERT_TRUE(registry_.reference_layout().has_value());
  EXPECT_EQ(registry_.reference_layout()->num_kv_heads(), 8u);
  BringUpPrefill(0, Layout(4));  // different KV heads: its KV would be garbage to decode
  BringUpPrefill(1, Layout());
  std::vector<WorkerStatus> s = registry_.Snapshot();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_FALSE(s[0].live());
  EXPECT_NE(s[0].detail.find("num_kv_heads: expected 8, worker has 4"), std::string::npos)
      << s[0].detail;
  EXPECT_TRUE(s[1].live());
  EXPECT_TRUE(registry_.Ready());
  EXPECT_EQ(registry_.Scheme(WorkerRole::kPrefill), "fp8");
  EXPECT_EQ(registry_.Scheme(WorkerRole::kDecode), "int4");
  ApiResult<WorkerHandle> p = registry_.Pick(WorkerRole::kPrefill);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->address(), "p1:1");
  EXPECT_EQ(p->identity().transports(0), "tcp");
}

// The worker compares sequence manifests itself (a state slot or KV layers that differ while
// the KV layout agrees); the router shows its typed answer as it is and marks it not serving,
// and a later change of a worker's manifest (a restart) is handshaken again.
TEST_F(WorkerRegistryTest, AManifestMismatchTheWorkerReportsIsRefusedAsItSaysIt) {
  BringUpDecode(0);
  v1::HandshakeResponse r = Handshake("prefill", Layout(), "fp8");
  r.set_kv_layout_compatible(false);
  r.set_reason(v1::FAILURE_REASON_MANIFEST_MISMATCH);
  r.set_mismatch("sequence manifests differ (a vs b): target state slot: only this worker has it");
  registry_.ApplyHandshake(WorkerRole::kPrefill, 0, r, registry_.reference_layout());
  registry_.ApplyHealth(WorkerRole::kPrefill, 0, Serving(0, 0));
  BringUpPrefill(1, Layout());
  std::vector<WorkerStatus> s = registry_.Snapshot();
  EXPECT_FALSE(s[0].live());
  EXPECT_EQ(s[0].detail, r.mismatch());  // not wrapped as a KV layout difference
  EXPECT_TRUE(s[1].live());

  v1::WorkerIdentity restarted = s[1].identity;
  restarted.mutable_manifest()->set_hash("0123456789abcdef");
  registry_.ApplyHealth(WorkerRole::kPrefill, 1, Serving(0, 0, &restarted));
  EXPECT_FALSE(registry_.Snapshot()[1].live());  // handshaking again
}

TEST_F(WorkerRegistryTest, AWorkerConfiguredInTheWrongRoleIsRefused) {
  registry_.ApplyHandshake(WorkerRole::kDecode, 0, Handshake("prefill", Layout(), "fp8"),
                           std::nullopt);
  registry_.ApplyHealth(WorkerRole::kDecode, 0, Serving(0, 0));
  const WorkerStatus s = registry_.Snapshot()[2];
  EXPECT_FALSE(s.live());
  EXPECT_NE(s.detail.find("--decode"), std::string::npos) << s.detail;
}

TEST_F(WorkerRegistryTest, PicksLeastLoadedCountingTheRoutersOwnInFlightCalls) {
  BringUpDecode(0, /*running=*/1);
  BringUpDecode(1, /*running=*/0);
  ApiResult<WorkerHandle> a = registry_.Pick(WorkerRole::kDecode);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->address(), "d1:1");
  {
    // d1 now has 1 in flight from the router; ties rotate.
    ApiResult<WorkerHandle> b = registry_.Pick(WorkerRole::kDecode);
    ApiResult<WorkerHandle> c = registry_.Pick(WorkerRole::kDecode);
    ASSERT_TRUE(b.ok() && c.ok());
    EXPECT_NE(b->address(), c->address());
    EXPECT_EQ(registry_.Snapshot()[2].router_in_flight + registry_.Snapshot()[3].router_in_flight,
              3);
  }
  // Dropping handles gives the load back.
  EXPECT_EQ(registry_.Snapshot()[3].router_in_flight, 1);
  EXPECT_EQ(registry_.Snapshot()[2].router_in_flight, 0);
}

TEST_F(WorkerRegistryTest, MarkDownRoutesAroundAWorkerUntilItIsHandshakenAgain) {
  BringUpDecode(0);
  registry_.MarkDown(WorkerRole::kDecode, "d0:1", "connection refused");
  ApiResult<WorkerHandle> h = registry_.Pick(WorkerRole::kDecode);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().message.find("connection refused"), std::string::npos);
  // A Health reply alone does not revive it: it may be a new process with other weights.
  registry_.ApplyHealth(WorkerRole::kDecode, 0, Serving(0, 0));
  EXPECT_FALSE(registry_.Pick(WorkerRole::kDecode).ok());
  BringUpDecode(0);
  EXPECT_TRUE(registry_.Pick(WorkerRole::kDecode).ok());
}

TEST_F(WorkerRegistryTest, NotServingAndFailedProbesTakeAWorkerOutAndRepeatedFailuresNotify) {
  std::vector<std::string> notified;
  registry_.SetDownCallback([&](WorkerRole role, const std::string& address, const std::string&) {
    notified.push_back(std::string(WorkerRoleName(role)) + " " + address);
  });
  BringUpDecode(0);
  v1::WorkerHealthResponse draining;
  draining.set_status(v1::SERVING_STATUS_NOT_SERVING);
  draining.set_detail("draining");
  registry_.ApplyHealth(WorkerRole::kDecode, 0, draining);
  EXPECT_EQ(registry_.Snapshot()[2].detail, "draining");
  EXPECT_FALSE(registry_.Pick(WorkerRole::kDecode).ok());
  registry_.ApplyHealth(WorkerRole::kDecode, 0, Serving(0, 0));
  EXPECT_TRUE(registry_.Pick(WorkerRole::kDecode).ok());

  const absl::Status down = absl::UnavailableError("connection refused");
  registry_.ApplyHealth(WorkerRole::kDecode, 0, down);
  EXPECT_FALSE(registry_.Pick(WorkerRole::kDecode).ok());
  registry_.ApplyHandshake(WorkerRole::kDecode, 0, down, std::nullopt);
  EXPECT_TRUE(notified.empty());
  registry_.ApplyHandshake(WorkerRole::kDecode, 0, down, std::nullopt);
  ASSERT_EQ(notified.size(), 1u);  // once, at the threshold
  EXPECT_EQ(notified[0], "decode d0:1");
  registry_.ApplyHandshake(WorkerRole::kDecode, 0, down, std::nullopt);
  EXPECT_EQ(notified.size(), 1u);
}

TEST_F(WorkerRegistryTest, ARestartWithOtherWeightsIsHandshakenAgain) {
  BringUpDecode(0);
  v1::WorkerIdentity changed = Handshake("decode", Layout(), "int2").worker();
  registry_.ApplyHealth(WorkerRole::kDecode, 0, Serving(0, 0, &changed));
  EXPECT_FALSE(registry_.Snapshot()[2].live());
  EXPECT_FALSE(registry_.Snapshot()[2].handshaken);
}

}  // namespace
}  // namespace dq::router
