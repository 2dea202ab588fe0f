// One registry for every part of a lease (decode_worker/lease_part_regions.h): the target's KV,
// a hybrid model's state slot and a drafter's KV are registered, written through the transport,
// landed and released together; after a release, and after a registration that fails at any
// region, no region stays registered and the lease table's free blocks and slots are back.
#include "decode_worker/lease_part_regions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode_worker/kv_lease_table.h"
#include "kvtransfer/transport.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/lease_parts.h"
#include "worker_common/sequence_manifest.h"

namespace dq::decode {
namespace {
namespace v1 = dqserve::v1;
using ::testing::HasSubstr;

// A local transport that refuses its `fail_at`-th RegisterRegion (1-based; 0: none) and counts
// the regions registered and not yet released.
class CountingTransport : public kvtransfer::Transport {
 public:
  explicit CountingTransport(std::unique_ptr<kvtransfer::Transport> inner)
      : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  bool supports_device_memory() const override { return false; }
  std::string address() const override { return inner_->address(); }
  absl::StatusOr<kvtransfer::RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) override {
    if (++calls_ == fail_at) return absl::UnavailableError("injected registration failure");
    auto h = inner_->RegisterRegion(ptr, bytes);
    if (h.ok()) ++live_;
    return h;
  }
  absl::Status ReleaseRegion(kvtransfer::RegionId id) override {
    absl::Status s = inner_->ReleaseRegion(id);
    if (s.ok()) --live_;
    return s;
  }
  absl::StatusOr<kvtransfer::RemoteRegionId> Prepare(std::string_view d) override {
    return inner_->Prepare(d);
  }
  absl::Status ReleaseRemote(kvtransfer::RemoteRegionId id) override {
    return inner_->ReleaseRemote(id);
  }
  absl::StatusOr<kvtransfer::TransferId> Post(kvtransfer::RegionId local,
                                              kvtransfer::RemoteRegionId remote,
                                              std::span<const kvtransfer::CopyOp> ops) override {
    return inner_->Post(local, remote, ops);
  }
  kvtransfer::TransferStatus Poll(kvtransfer::TransferId id) override { return inner_->Poll(id); }

  int fail_at = 0;
  int calls_ = 0;
  int live_ = 0;

 private:
  std::unique_ptr<kvtransfer::Transport> inner_;
};

KvCacheOptions TargetPool() {
  KvCacheOptions o;
  o.num_layers = 2;
  o.num_kv_heads = 1;
  o.head_dim = 4;
  o.block_size = 4;
  o.num_blocks = 32;
  o.state_slot_floats = 3 * 10;  // three recurrent layers of 10 floats
  o.num_state_slots = 3;
  return o;
}

KvCacheOptions DrafterPool() {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 2;
  o.block_size = 4;
  o.num_blocks = 32;
  return o;
}

class LeasePartRegionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto local = kvtransfer::CreateTransport({.kind = "local"});
    ASSERT_TRUE(local.ok()) << local.status();
    transport_ = std::make_unique<CountingTransport>(std::move(*local));
    target_staging_ = worker::CreateHostKvStaging(target_);
    drafter_staging_ = worker::CreateHostCopyKvStaging(drafter_);
    slot_layout_.set_architecture("Qwen3_5ForCausalLM");
    for (uint32_t l : {0u, 1u, 2u}) slot_layout_.add_layers(l);
    slot_layout_.set_layer_bytes(10 * sizeof(float));
    slot_layout_.set_dtype("f32");
    const std::vector<int> attention_layers = {3, 7};
    regions_ = std::make_unique<LeasePartRegions>(
        *transport_, *target_staging_,
        worker::PagedKvLayout("Qwen3_5ForCausalLM", 8, target_.options(), "f32", attention_layers));
    regions_->AddStateSlots(target_.state_slots(), slot_layout_);
    regions_->AddDrafterKv(*drafter_staging_,
                           worker::DrafterKvLayout("dflash", drafter_, *drafter_staging_), "fp");
    table_ = std::make_unique<KvLeaseTable>(target_);
    table_->set_free_hook([r = regions_.get()](const KvLease& l) { r->Release(l.lease_id); });
    start_ = table_->stats();
  }

  void ExpectAllBack() {
    EXPECT_EQ(regions_->num_regions(), 0);
    EXPECT_EQ(transport_->live_, 0);
    const KvLeaseStats now = table_->stats();
    EXPECT_EQ(now.free_blocks, start_.free_blocks);
    EXPECT_EQ(now.free_state_slots, start_.free_state_slots);
    EXPECT_EQ(now.total_state_slots, 3);
  }

  KvBlockPool target_{TargetPool()};
  KvBlockPool drafter_{DrafterPool()};
  std::unique_ptr<CountingTransport> transport_;
  std::unique_ptr<worker::KvStaging> target_staging_, drafter_staging_;
  v1::StateSlotLayout slot_layout_;
  std::unique_ptr<LeasePartRegions> regions_;
  std::unique_ptr<KvLeaseTable> table_;
  KvLeaseStats start_;
};

// Regions a 10-token prompt (3 blocks of 4, one run) needs: K and V of 2 target layers, the
// slot, K and V of 1 drafter layer.
constexpr int kRegionsPerLease = 2 * 2 + 1 + 2 * 1;

TEST_F(LeasePartRegionsTest, RegistersEveryManifestPartAndReleasesThemTogether) {
  const v1::SequenceManifest& m = regions_->manifest();
  ASSERT_EQ(m.parts_size(), 3);  // lease order: target KV, state slot, drafter KV
  EXPECT_EQ(m.parts(1).kind(), v1::STATE_PART_KIND_STATE_SLOT);
  EXPECT_EQ(m.parts(2).role(), v1::STATE_PART_ROLE_DRAFTER);
  auto lease = table_->Reserve("r", 16, std::chrono::seconds(30));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_GE(lease->state_slot, 0);
  auto parts = regions_->Register(*lease, 10);
  ASSERT_TRUE(parts.ok()) << parts.status();
  ASSERT_EQ(parts->size(), 3u);
  v1::KvLease wire;
  wire.set_lease_id(lease->lease_id);
  for (int i = 0; i < 3; ++i) {
    const v1::StatePart& p = (*parts)[i];
    // Each part is its manifest part plus where to write it.
    EXPECT_EQ(worker::PartLayoutMismatch(p, m.parts(i)), "") << i;
    EXPECT_EQ(p.role(), m.parts(i).role());
    EXPECT_EQ(p.required(), m.parts(i).required());
    EXPECT_EQ(p.endpoint().transport(), "local");
    *wire.add_parts() = p;
  }
  EXPECT_TRUE(worker::CheckLeaseParts(wire).ok()) << worker::CheckLeaseParts(wire);
  EXPECT_EQ(regions_->num_regions(), kRegionsPerLease);
  EXPECT_EQ(transport_->live_, kRegionsPerLease);

  // The prefill worker's view: write the slot through its one region.
  const v1::KvRemoteRegion& slot_region = (*parts)[1].endpoint().regions(0);
  std::vector<float> state(30);
  for (int i = 0; i < 30; ++i) state[i] = 0.5f * i + 1;
  auto src = transport_->RegisterRegion(state.data(), state.size() * sizeof(float));
  ASSERT_TRUE(src.ok());
  auto remote = transport_->Prepare(slot_region.region_descriptor());
  ASSERT_TRUE(remote.ok()) << remote.status();
  const kvtransfer::CopyOp op{0, 0, state.size() * sizeof(float)};
  auto id = transport_->Post(src->id, *remote, {&op, 1});
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(kvtransfer::WaitForTransfer(*transport_, *id, 1000).ok());
  ASSERT_TRUE(transport_->ReleaseRemote(*remote).ok());
  ASSERT_TRUE(transport_->ReleaseRegion(src->id).ok());
  EXPECT_EQ(std::memcmp(target_.state_slots().slot(lease->state_slot), state.data(),
                        state.size() * sizeof(float)),
            0);
  // The drafter's buffer waits for the sequence to start drafting.
  const auto shipped = regions_->TakeDrafterKv(lease->lease_id);
  ASSERT_NE(shipped, nullptr);
  EXPECT_EQ(shipped->prompt_blocks, 3);
  EXPECT_TRUE(regions_->Land(lease->lease_id).ok());  // in place: nothing to copy

  ASSERT_TRUE(table_->Release(lease->lease_id).ok());  // the free hook releases every part
  ExpectAllBack();
  EXPECT_EQ(regions_->TakeDrafterKv(lease->lease_id), nullptr);
  EXPECT_EQ(regions_->Land(lease->lease_id).code(), absl::StatusCode::kNotFound);
}

// A registration that fails at any one region (target KV, slot or drafter KV) leaves nothing
// registered; the lease's release then gives every block and slot back, as Reserve does.
TEST_F(LeasePartRegionsTest, EveryFailedRegistrationLeavesNothingBehind) {
  int judged = 0;
  for (int fail_at = 1;; ++fail_at) {
    auto lease = table_->Reserve(absl::StrCat("r", fail_at), 16, std::chrono::seconds(30));
    ASSERT_TRUE(lease.ok()) << lease.status();
    // The target's regions: K and V of 2 layers per run of the 3 prompt blocks.
    const std::vector<int32_t> prompt(lease->blocks.begin(), lease->blocks.begin() + 3);
    const int target = 4 * static_cast<int>(ToBlockRuns(prompt).size());
    if (fail_at > target + 1 + 2) {
      ASSERT_TRUE(table_->Release(lease->lease_id).ok());
      break;
    }
    transport_->calls_ = 0;
    transport_->fail_at = fail_at;
    auto parts = regions_->Register(*lease, 10);
    ASSERT_FALSE(parts.ok()) << fail_at;
    EXPECT_EQ(parts.status().code(), absl::StatusCode::kUnavailable);
    // The message names the part that failed.
    const std::string what = fail_at <= target       ? "'s KV with"
                             : fail_at == target + 1 ? "state slot"
                                                     : "drafter";
    EXPECT_THAT(parts.status().message(), HasSubstr(what)) << fail_at;
    EXPECT_EQ(regions_->num_regions(), 0) << fail_at;
    EXPECT_EQ(transport_->live_, 0) << fail_at;
    ASSERT_TRUE(table_->Release(lease->lease_id).ok());
    ExpectAllBack();
    ++judged;
  }
  EXPECT_GE(judged, kRegionsPerLease);
  ExpectAllBack();
  transport_->fail_at = 0;
  // A lease without a slot (a bug upstream) is refused; its KV regions do not stay behind.
  KvLease no_slot;
  no_slot.lease_id = "no-slot";
  no_slot.blocks = {1, 2, 3};
  no_slot.runs = ToBlockRuns(no_slot.blocks);
  transport_->calls_ = 0;
  auto refused = regions_->Register(no_slot, 10);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(regions_->num_regions(), 0);
  EXPECT_EQ(transport_->live_, 0);
}

}  // namespace
}  // namespace dq::decode
