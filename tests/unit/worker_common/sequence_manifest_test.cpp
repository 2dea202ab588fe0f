// The sequence manifest (worker_common/sequence_manifest.h): what a sequence owns, as each
// family's program declares it, checked against the engine's own pool and slot geometry, and
// the handshake's comparison of two workers' manifests.
#include "worker_common/sequence_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/unit/engine/tiny_model.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/lease_parts.h"
#include "worker_common/worker_identity.h"
#include "worker_common/worker_status.h"

namespace dq::worker {
namespace {
namespace v1 = dqserve::v1;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::unique_ptr<PhaseModel> Load(const std::string& path) {
  PhaseModelOptions o;
  o.model = path;
  o.threads = 1;
  o.kv_capacity_tokens = 256;
  o.state_slots = 2;
  auto pm = LoadPhaseModel(o);
  EXPECT_TRUE(pm.ok()) << pm.status() << " (run through ctest: the fixtures make the models)";
  return pm.ok() ? std::move(*pm) : nullptr;
}

// The config's layers that are (or are not) linear-attention ones: an independent statement of
// what the program should declare.
std::vector<uint32_t> ConfigLayers(const ModelConfig& c, bool linear) {
  std::vector<uint32_t> out;
  for (int i = 0; i < c.num_layers; ++i) {
    if (c.is_linear_layer(i) == linear) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

// A pure-attention model: one required target paged KV part over every layer, whose bytes are
// the engine pool's own block geometry.
void ExpectAttentionOnly(const PhaseModel& pm, const std::string& arch) {
  const v1::SequenceManifest m = ManifestOf(pm);
  const ModelConfig& c = pm.runner->config();
  EXPECT_EQ(c.architecture, arch);
  ASSERT_EQ(m.parts_size(), 1);
  const v1::StatePart& kv = m.parts(0);
  EXPECT_EQ(kv.role(), v1::STATE_PART_ROLE_TARGET);
  EXPECT_EQ(kv.kind(), v1::STATE_PART_KIND_PAGED_KV);
  EXPECT_TRUE(kv.required());
  EXPECT_EQ(kv.blocks_size(), 0);  // a manifest part has no blocks or endpoint
  EXPECT_FALSE(kv.has_endpoint());
  EXPECT_THAT(kv.kv_layout().layers(), ElementsAreArray(ConfigLayers(c, false)));
  EXPECT_EQ(kv.kv_layout().layers_size(), c.num_layers);
  const KvTensorLayout& pool = pm.kv_staging->geometry();
  EXPECT_EQ(PartLayerBytes(kv), pool.block_bytes);
  const int tokens = 37;  // 3 blocks of 16
  EXPECT_EQ(PartSequenceBytes(kv, tokens), 2ull * pool.num_layers * 3 * pool.block_bytes);
  EXPECT_EQ(m.hash().size(), 16u);
  EXPECT_EQ(ManifestMismatch(m, m, "peer"), "");
  EXPECT_TRUE(CheckLeaseParts([&] {
                v1::KvLease lease;  // a lease of the manifest's parts with blocks is well formed
                *lease.add_parts() = kv;
                lease.mutable_parts(0)->add_blocks()->set_count(1);
                return lease;
              }())
                  .ok());
}

TEST(SequenceManifest, Qwen3IsItsTargetKvOverEveryLayer) {
  auto pm = Load(dq::testing::TinyQwen3Path());
  ASSERT_NE(pm, nullptr);
  ExpectAttentionOnly(*pm, "qwen3");
}

TEST(SequenceManifest, LlamaIsItsTargetKvOverEveryLayer) {
  auto pm = Load(dq::testing::SmolLM2Path());
  ASSERT_NE(pm, nullptr);
  ExpectAttentionOnly(*pm, "llama");
}

TEST(SequenceManifest, Qwen3_5OwnsKvOfItsAttentionLayersAndAStateSlot) {
  auto pm = Load(dq::testing::TinyQwen3_5Path());
  ASSERT_NE(pm, nullptr);
  const ModelConfig& c = pm->runner->config();
  const v1::SequenceManifest m = ManifestOf(*pm);
  ASSERT_EQ(m.parts_size(), 2);
  const v1::StatePart& kv = m.parts(0);
  const v1::StatePart& slot = m.parts(1);
  // KV only for the full-attention layers, the slot for the Gated DeltaNet ones, as the config
  // says independently of the program.
  const std::vector<uint32_t> attention = ConfigLayers(c, false);
  const std::vector<uint32_t> linear = ConfigLayers(c, true);
  ASSERT_FALSE(attention.empty());
  ASSERT_FALSE(linear.empty());
  EXPECT_THAT(kv.kv_layout().layers(), ElementsAreArray(attention));
  EXPECT_EQ(pm->kv_staging->geometry().num_layers, static_cast<int>(attention.size()));
  EXPECT_EQ(PartSequenceBytes(kv, 16),
            2ull * attention.size() * pm->kv_staging->geometry().block_bytes);
  EXPECT_EQ(slot.role(), v1::STATE_PART_ROLE_TARGET);
  EXPECT_EQ(slot.kind(), v1::STATE_PART_KIND_STATE_SLOT);
  EXPECT_TRUE(slot.required());
  EXPECT_THAT(slot.slot_layout().layers(), ElementsAreArray(linear));
  // The slot's bytes are the pool's slot, whatever the sequence's length.
  const StateSlotPool& slots = pm->runner->kv_pool().state_slots();
  EXPECT_EQ(PartSequenceBytes(slot, 1), slots.slot_bytes());
  EXPECT_EQ(PartSequenceBytes(slot, 1000), slots.slot_bytes());
  EXPECT_EQ(PartLayerBytes(slot) * linear.size(), slots.slot_bytes());
  // One GDN layer's state: conv inputs of (kernel - 1) steps plus the (heads x dk x dv) state.
  const uint64_t floats =
      uint64_t{static_cast<uint64_t>(c.gdn_conv_dim())} * (c.gdn_conv_kernel - 1) +
      uint64_t{static_cast<uint64_t>(c.gdn_value_heads)} * c.gdn_key_dim * c.gdn_value_dim;
  EXPECT_EQ(PartLayerBytes(slot), floats * sizeof(float));
  EXPECT_NE(m.hash(), ManifestOf(*Load(dq::testing::TinyQwen3Path())).hash());
}

// A drafter's KV joins the manifest as an optional part: it changes the hash, never the
// handshake's verdict, and is reported as a difference to log.
TEST(SequenceManifest, ADrafterPartIsOptional) {
  auto pm = Load(dq::testing::TinyQwen3Path());
  ASSERT_NE(pm, nullptr);
  const v1::SequenceManifest plain = ManifestOf(*pm);
  KvCacheOptions o;  // a DFlash drafter's context pool: its own layers, heads and head dim
  o.num_layers = 1;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = 16;
  o.num_blocks = 4;
  KvBlockPool pool(o);
  const auto staging = CreateHostKvStaging(pool);
  v1::SequenceManifest with = plain;
  AddManifestPart(&with, PagedKvPart(v1::STATE_PART_ROLE_DRAFTER,
                                     DrafterKvLayout("dflash", pool, *staging), "dflash:1234"));
  ASSERT_EQ(with.parts_size(), 2);
  EXPECT_FALSE(with.parts(1).required());
  EXPECT_EQ(PartLayerBytes(with.parts(1)), 16u * 2 * 8 * 4);
  EXPECT_EQ(PartSequenceBytes(with.parts(1), 17), 2ull * 1 * 2 * 16 * 2 * 8 * 4);
  EXPECT_NE(with.hash(), plain.hash());
  EXPECT_EQ(ManifestMismatch(with, plain, "the decode worker"), "");
  EXPECT_TRUE(CheckManifest(with, plain, "the decode worker").ok());
  EXPECT_THAT(OptionalPartDifferences(with, plain, "the decode worker"),
              HasSubstr("drafter paged KV: only the decode worker has it"));
  v1::SequenceManifest other = with;
  other.mutable_parts(1)->set_fingerprint("dflash:5678");
  SealManifest(&other);
  EXPECT_THAT(OptionalPartDifferences(other, with, "the decode worker"),
              HasSubstr("weights dflash:5678 vs this worker's dflash:1234"));
}

class ManifestHandshakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pm_ = Load(dq::testing::TinyQwen3_5Path());
    ASSERT_NE(pm_, nullptr);
    self_ = WorkerIdentityOf(*pm_, {"prefill", "127.0.0.1:1", {"tcp"}});
  }
  // The handshake a router sends with a decode worker's identity `peer`.
  v1::HandshakeResponse Answer(const v1::SequenceManifest& peer) {
    v1::HandshakeRequest req;
    *req.mutable_expected_kv_layout() = self_.kv_layout();
    *req.mutable_expected_manifest() = peer;
    return AnswerHandshake(self_, req);
  }
  std::unique_ptr<PhaseModel> pm_;
  v1::WorkerIdentity self_;
};

TEST_F(ManifestHandshakeTest, EqualManifestsPair) {
  ASSERT_EQ(self_.manifest().parts_size(), 2);
  const v1::HandshakeResponse r = Answer(self_.manifest());
  EXPECT_TRUE(r.kv_layout_compatible()) << r.mismatch();
  EXPECT_EQ(r.reason(), v1::FAILURE_REASON_UNSPECIFIED);
  // A router of before manifests sends none: only the KV layout is checked.
  EXPECT_TRUE(Answer(v1::SequenceManifest()).kv_layout_compatible());
}

TEST_F(ManifestHandshakeTest, AnotherStateSlotLayoutIsRefusedTypedWithBothValues) {
  v1::SequenceManifest peer = self_.manifest();
  const uint64_t mine = peer.parts(1).slot_layout().layer_bytes();
  peer.mutable_parts(1)->mutable_slot_layout()->set_layer_bytes(mine * 2);
  SealManifest(&peer);
  const v1::HandshakeResponse r = Answer(peer);
  EXPECT_FALSE(r.kv_layout_compatible());
  EXPECT_EQ(r.reason(), v1::FAILURE_REASON_MANIFEST_MISMATCH);
  EXPECT_THAT(r.mismatch(), HasSubstr("target state slot"));
  EXPECT_THAT(r.mismatch(),
              HasSubstr(absl::StrCat("layer_bytes ", mine * 2, " vs this worker's ", mine)));
  EXPECT_THAT(r.mismatch(), HasSubstr(peer.hash()));
  EXPECT_THAT(r.mismatch(), HasSubstr(self_.manifest().hash()));
  EXPECT_THAT(r.mismatch(), HasSubstr("run both workers on the same model"));
}

TEST_F(ManifestHandshakeTest, AMissingStateSlotOrOtherKvLayersAreRefused) {
  v1::SequenceManifest no_slot = self_.manifest();
  no_slot.mutable_parts()->RemoveLast();  // a peer that would decode from a zero state
  SealManifest(&no_slot);
  v1::HandshakeResponse r = Answer(no_slot);
  EXPECT_FALSE(r.kv_layout_compatible());
  EXPECT_EQ(r.reason(), v1::FAILURE_REASON_MANIFEST_MISMATCH);
  EXPECT_THAT(r.mismatch(), HasSubstr("target state slot: only this worker has it"));

  v1::SequenceManifest layers = self_.manifest();
  v1::KvLayout* kv = layers.mutable_parts(0)->mutable_kv_layout();
  kv->set_layers(0, kv->layers(0) + 1);
  SealManifest(&layers);
  r = Answer(layers);
  EXPECT_FALSE(r.kv_layout_compatible());
  EXPECT_EQ(r.reason(), v1::FAILURE_REASON_MANIFEST_MISMATCH);
  EXPECT_THAT(r.mismatch(), HasSubstr("target paged KV: KV layers ["));

  // CheckManifest carries the same reason as a status, for callers that act on a type.
  const absl::Status s = CheckManifest(layers, self_.manifest(), "the decode worker");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(FailureReasonOf(s), v1::FAILURE_REASON_MANIFEST_MISMATCH);
}

}  // namespace
}  // namespace dq::worker
