#include "worker_common/lease_parts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "worker_common/state_slot_layout.h"

namespace dq::worker {
namespace {

namespace v1 = dqserve::v1;
using ::testing::HasSubstr;

v1::StateSlotLayout Layout() {
  v1::StateSlotLayout l;
  l.set_architecture("Qwen3_5ForCausalLM");
  l.add_layers(0);
  l.add_layers(1);
  l.add_layers(2);
  l.set_layer_bytes(1024);
  l.set_dtype("f32");
  return l;
}

// A hybrid lease as a decode worker builds it: the target's KV and its state slot.
v1::KvLease HybridLease() {
  v1::KvLease lease;
  lease.set_lease_id("L");
  v1::StatePart* kv = lease.add_parts();
  kv->set_role(v1::STATE_PART_ROLE_TARGET);
  kv->set_kind(v1::STATE_PART_KIND_PAGED_KV);
  kv->set_required(true);
  v1::BlockRun* run = kv->add_blocks();
  run->set_start_block(0);
  run->set_count(2);
  v1::StatePart* slot = lease.add_parts();
  slot->set_role(v1::STATE_PART_ROLE_TARGET);
  slot->set_kind(v1::STATE_PART_KIND_STATE_SLOT);
  slot->set_required(true);
  *slot->mutable_slot_layout() = Layout();
  v1::KvRemoteRegion* r = slot->mutable_endpoint()->add_regions();
  r->set_tensor(v1::KV_TENSOR_STATE_SLOT);
  r->set_num_layers(3);
  r->set_layer_stride_bytes(1024);
  return lease;
}

v1::StatePart& Slot(v1::KvLease& lease) {
  return *FindMutablePart(&lease, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT);
}

std::string Refusal(const v1::KvLease& lease) {
  const absl::Status s = CheckLeaseParts(lease);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(LeasePartsTest, AHybridLeaseIsWellFormedAndItsPartsAreFoundByKind) {
  const v1::KvLease lease = HybridLease();
  ASSERT_TRUE(CheckLeaseParts(lease).ok()) << CheckLeaseParts(lease);
  EXPECT_EQ(FindPart(lease, v1::STATE_PART_ROLE_TARGET)->kind(), v1::STATE_PART_KIND_PAGED_KV);
  EXPECT_EQ(FindPart(lease, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT)
                ->slot_layout()
                .layer_bytes(),
            1024u);
  EXPECT_EQ(FindPart(lease, v1::STATE_PART_ROLE_DRAFTER, v1::STATE_PART_KIND_STATE_SLOT), nullptr);
  EXPECT_EQ(StateSlotBytes(Layout()), 3072u);
}

TEST(LeasePartsTest, MalformedStateSlotPartsAreRefusedNamingThePart) {
  v1::KvLease lease = HybridLease();
  Slot(lease).set_required(false);
  EXPECT_THAT(Refusal(lease), HasSubstr("part 1 (target state slot) must be required"));

  lease = HybridLease();
  Slot(lease).clear_slot_layout();
  EXPECT_THAT(Refusal(lease), HasSubstr("(target state slot) has no slot layout"));

  lease = HybridLease();
  Slot(lease).mutable_slot_layout()->set_dtype("");
  EXPECT_THAT(Refusal(lease), HasSubstr("has no slot layout"));

  lease = HybridLease();
  Slot(lease).add_blocks()->set_count(1);
  EXPECT_THAT(Refusal(lease), HasSubstr("a state slot has neither"));

  lease = HybridLease();
  Slot(lease).set_cached_tokens(16);
  EXPECT_THAT(Refusal(lease), HasSubstr("a state slot has neither"));

  lease = HybridLease();
  Slot(lease).mutable_endpoint()->clear_regions();
  EXPECT_THAT(Refusal(lease), HasSubstr("has 0 regions; a state slot has exactly one"));

  lease = HybridLease();
  Slot(lease).mutable_endpoint()->mutable_regions(0)->set_tensor(v1::KV_TENSOR_KEY);
  EXPECT_THAT(Refusal(lease), HasSubstr("region is not a whole slot"));

  lease = HybridLease();
  Slot(lease).mutable_endpoint()->mutable_regions(0)->set_num_layers(2);
  EXPECT_THAT(Refusal(lease), HasSubstr("region is not a whole slot"));

  lease = HybridLease();
  Slot(lease).set_role(v1::STATE_PART_ROLE_DRAFTER);
  EXPECT_THAT(Refusal(lease), HasSubstr("(drafter state slot): only the target's state"));

  lease = HybridLease();
  *lease.add_parts() = lease.parts(1);
  EXPECT_THAT(Refusal(lease), HasSubstr("part 2 (target state slot) repeats a (role, kind)"));

  // A state slot is no substitute for the target's KV.
  lease = HybridLease();
  lease.mutable_parts()->DeleteSubrange(0, 1);
  EXPECT_THAT(Refusal(lease), HasSubstr("has 0 target paged KV parts"));

  lease = HybridLease();
  Slot(lease).set_kind(static_cast<v1::StatePartKind>(7));
  EXPECT_THAT(Refusal(lease), HasSubstr("STATE_PART_KIND_STATE_SLOT parts only"));
}

TEST(LeasePartsTest, SlotLayoutMismatchNamesEachField) {
  EXPECT_EQ(StateSlotLayoutMismatch(Layout(), Layout()), "");
  v1::StateSlotLayout other = Layout();
  other.set_layer_bytes(2048);
  other.set_layers(2, 4);
  other.set_dtype("bf16");
  const std::string m = StateSlotLayoutMismatch(other, Layout());
  EXPECT_THAT(m, HasSubstr("layer_bytes 2048 vs this worker's 1024"));
  EXPECT_THAT(m, HasSubstr("layers [0,1,4] vs this worker's [0,1,2]"));
  EXPECT_THAT(m, HasSubstr("dtype bf16 vs this worker's f32"));
  other = Layout();
  other.set_architecture("LlamaForCausalLM");
  EXPECT_THAT(StateSlotLayoutMismatch(other, Layout()), HasSubstr("architecture"));
}

TEST(LeasePartsTest, CommitsSayPerRoleAndKindWhatWasWritten) {
  v1::KvCommit commit;
  CommitPart(&commit, v1::STATE_PART_ROLE_TARGET, "");
  CommitPart(&commit, v1::STATE_PART_ROLE_TARGET, "transfer failed",
             v1::STATE_PART_KIND_STATE_SLOT);
  EXPECT_TRUE(PartWritten(commit, v1::STATE_PART_ROLE_TARGET));
  EXPECT_FALSE(PartWritten(commit, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT));
  EXPECT_EQ(PartSkipped(commit, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT),
            "transfer failed");
  // A commit from before kinds existed (kind unset) speaks of paged KV only.
  v1::KvCommit old;
  v1::StatePartCommit* c = old.add_parts();
  c->set_role(v1::STATE_PART_ROLE_TARGET);
  c->set_written(true);
  EXPECT_TRUE(PartWritten(old, v1::STATE_PART_ROLE_TARGET));
  EXPECT_FALSE(PartWritten(old, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT));
}

TEST(StateSlotLayoutTest, DeclaredFromTheProgramsRecurrentLayers) {
  SequenceStateSpec state;  // as ModelProgram::state() declares a 3:1 hybrid of 8 layers
  state.recurrent_layer_ids = {0, 1, 2, 4, 5, 6};
  state.recurrent_layer_floats.assign(6, 100);
  state.recurrent_layers = 6;
  state.slot_floats = 600;
  auto l = StateSlotLayoutFor("Qwen3_5ForCausalLM", state);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_TRUE(l->has_value());
  EXPECT_THAT((*l)->layers(), ::testing::ElementsAre(0, 1, 2, 4, 5, 6));
  EXPECT_EQ((*l)->layer_bytes(), 400u);
  EXPECT_EQ((*l)->dtype(), "f32");
  EXPECT_FALSE(StateSlotLayoutFor("LlamaForCausalLM", SequenceStateSpec{})->has_value());
  state.recurrent_layer_floats[3] = 101;  // layer 4 keeps another size: not describable
  state.slot_floats = 601;
  const auto uneven = StateSlotLayoutFor("Qwen3_5ForCausalLM", state);
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(uneven.status().message(), HasSubstr("layers 0 and 4"));
}

}  // namespace
}  // namespace dq::worker
