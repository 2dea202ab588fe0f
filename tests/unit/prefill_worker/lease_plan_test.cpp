// LeasePlan: prompt blocks -> a lease part's blocks -> (region, offset), and how copies merge.
#include "prefill_worker/lease_plan.h"

#include <gtest/gtest.h>

namespace dq::prefill {
namespace {
namespace v1 = dqserve::v1;

constexpr uint64_t kBlock = 1024;
constexpr uint64_t kStride = 100 * kBlock;  // 100 blocks per layer in the decode pool
const KvTensorLayout kLocal{2, 50, 16, kBlock};

void AddRun(v1::StatePart& lease, int start, int count) {
  v1::BlockRun* r = lease.add_blocks();
  r->set_start_block(start);
  r->set_count(count);
}

void AddRegion(v1::StatePart& lease, v1::KvTensor t, int first_layer, int layers, int first_block,
               int blocks) {
  v1::KvRemoteRegion* r = lease.mutable_endpoint()->add_regions();
  r->set_tensor(t);
  r->set_first_layer(first_layer);
  r->set_num_layers(layers);
  r->set_layer_stride_bytes(kStride);
  r->set_block_bytes(kBlock);
  r->set_first_block(first_block);
  r->set_num_blocks(blocks);
}

// Whole-pool regions (all layers, all blocks): one K and one V.
v1::StatePart WholePoolLease() {
  v1::StatePart lease;
  AddRegion(lease, v1::KV_TENSOR_KEY, 0, 2, 0, 100);
  AddRegion(lease, v1::KV_TENSOR_VALUE, 0, 2, 0, 100);
  return lease;
}

TEST(LeasePlan, ConsecutiveBlocksMergeIntoOneCopy) {
  v1::StatePart lease = WholePoolLease();
  AddRun(lease, 10, 4);
  auto plan = LeasePlan::Create("lease", lease, 60, kLocal);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int32_t> local = {7, 8, 9, 12};
  const auto groups = plan->Copies(v1::KV_TENSOR_VALUE, 1, 0, 4, local);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].region, 1);
  ASSERT_EQ(groups[0].copies.size(), 2u);  // local 7..9 are one run, 12 another
  EXPECT_EQ(groups[0].copies[0].local_offset, 50 * kBlock + 7 * kBlock);
  EXPECT_EQ(groups[0].copies[0].remote_offset, kStride + 10 * kBlock);
  EXPECT_EQ(groups[0].copies[0].bytes, 3 * kBlock);
  EXPECT_EQ(groups[0].copies[1].local_offset, 50 * kBlock + 12 * kBlock);
  EXPECT_EQ(groups[0].copies[1].remote_offset, kStride + 13 * kBlock);
  EXPECT_EQ(groups[0].copies[1].bytes, kBlock);
}

TEST(LeasePlan, PerRunPerLayerRegionsSplitPostsAndOffsetsStartAtTheRun) {
  v1::StatePart lease;
  AddRun(lease, 30, 2);
  AddRun(lease, 5, 1);
  for (int layer = 0; layer < 2; ++layer) {
    for (auto t : {v1::KV_TENSOR_KEY, v1::KV_TENSOR_VALUE}) {
      AddRegion(lease, t, layer, 1, 30, 2);
      AddRegion(lease, t, layer, 1, 5, 1);
    }
  }
  auto plan = LeasePlan::Create("lease", lease, 40, kLocal);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->remote_block(0), 30);
  EXPECT_EQ(plan->remote_block(2), 5);
  // Prompt blocks 1..2 of layer 1's keys: the end of run 1 and all of run 2.
  const auto groups = plan->Copies(v1::KV_TENSOR_KEY, 1, 1, 3, std::vector<int32_t>{0, 1, 2});
  ASSERT_EQ(groups.size(), 2u);
  // Regions are listed layer 0 (K30, K5, V30, V5), then layer 1 (K30 = index 4, K5 = 5).
  EXPECT_EQ(groups[0].region, 4);
  ASSERT_EQ(groups[0].copies.size(), 1u);
  EXPECT_EQ(groups[0].copies[0].remote_offset, kBlock);  // block 31 inside [30, 32)
  EXPECT_EQ(groups[0].copies[0].local_offset, 50 * kBlock + kBlock);
  EXPECT_EQ(groups[1].region, 5);
  EXPECT_EQ(groups[1].copies[0].remote_offset, 0u);
}

TEST(LeasePlan, RefusesLeasesThatCannotHoldThePrompt) {
  v1::StatePart lease = WholePoolLease();
  AddRun(lease, 0, 2);
  auto plan = LeasePlan::Create("lease", lease, 33, kLocal);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("needs 3"), std::string::npos) << plan.status();

  lease = WholePoolLease();
  AddRun(lease, 99, 2);  // block 100 is past the regions
  plan = LeasePlan::Create("lease", lease, 32, kLocal);
  EXPECT_NE(plan.status().message().find("no K region for layer 0 block 100"), std::string::npos)
      << plan.status();

  lease = WholePoolLease();
  AddRun(lease, 0, 1);
  lease.mutable_endpoint()->mutable_regions(1)->set_block_bytes(2 * kBlock);
  plan = LeasePlan::Create("lease", lease, 16, kLocal);
  EXPECT_NE(plan.status().message().find("block_bytes"), std::string::npos) << plan.status();
}

// Regions are looked up through a per-(tensor, layer) index: one spanning more layers than this
// worker has serves the ones it has, and a layer left without a region is refused by name.
TEST(LeasePlan, RegionsIndexedByLayerFindTheirLayersOnly) {
  v1::StatePart lease;
  AddRun(lease, 10, 2);
  AddRegion(lease, v1::KV_TENSOR_KEY, 0, 5, 0, 100);  // layers 0..4; this worker has 0..1
  AddRegion(lease, v1::KV_TENSOR_VALUE, 1, 1, 0, 100);
  AddRegion(lease, v1::KV_TENSOR_VALUE, 0, 1, 0, 100);
  auto plan = LeasePlan::Create("lease", lease, 32, kLocal);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<int32_t> local = {3, 4};
  const auto k1 = plan->Copies(v1::KV_TENSOR_KEY, 1, 0, 2, local);
  ASSERT_EQ(k1.size(), 1u);
  EXPECT_EQ(k1[0].region, 0);
  EXPECT_EQ(k1[0].copies[0].remote_offset, kStride + 10 * kBlock);
  const auto v0 = plan->Copies(v1::KV_TENSOR_VALUE, 0, 0, 2, local);
  ASSERT_EQ(v0.size(), 1u);
  EXPECT_EQ(v0[0].region, 2);  // the layer-0 V region, listed after layer 1's
  EXPECT_EQ(v0[0].copies[0].remote_offset, 10 * kBlock);

  v1::StatePart gap;
  AddRun(gap, 10, 2);
  AddRegion(gap, v1::KV_TENSOR_KEY, 0, 2, 0, 100);
  AddRegion(gap, v1::KV_TENSOR_VALUE, 0, 1, 0, 100);  // no V for layer 1
  plan = LeasePlan::Create("lease", gap, 32, kLocal);
  EXPECT_NE(plan.status().message().find("no V region for layer 1 block 10"), std::string::npos)
      << plan.status();
}

}  // namespace
}  // namespace dq::prefill

namespace dq::prefill {
namespace {

// Blocks the decode worker already holds (StatePart.cached_tokens) need no region and ship
// nothing; the rest ship as before. Cached counts that are not whole blocks before the
// prompt's last token are refused.
TEST(LeasePlan, CachedLeadingBlocksShipNothing) {
  v1::StatePart lease;
  AddRun(lease, 20, 4);  // blocks 20, 21 cached; 22, 23 written
  lease.set_cached_tokens(32);
  for (v1::KvTensor t : {v1::KV_TENSOR_KEY, v1::KV_TENSOR_VALUE}) {
    AddRegion(lease, t, 0, 2, 22, 2);  // regions over the written blocks only
  }
  auto plan = LeasePlan::Create("lease", lease, 60, kLocal);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->first_shipped_block(), 2);
  const std::vector<int32_t> local = {0, 1, 2, 3};
  EXPECT_TRUE(plan->Copies(v1::KV_TENSOR_KEY, 0, 0, 2, local).empty());
  const auto groups = plan->Copies(v1::KV_TENSOR_KEY, 1, 0, 4, local);
  ASSERT_EQ(groups.size(), 1u);
  ASSERT_EQ(groups[0].copies.size(), 1u);
  EXPECT_EQ(groups[0].copies[0].local_offset, 50 * kBlock + 2 * kBlock);
  EXPECT_EQ(groups[0].copies[0].remote_offset, kStride);
  EXPECT_EQ(groups[0].copies[0].bytes, 2 * kBlock);
  for (uint32_t bad : {8u, 64u, 60u}) {  // not a block; past the prompt; covers its last token
    v1::StatePart l = lease;
    l.set_cached_tokens(bad);
    auto refused = LeasePlan::Create("lease", l, 60, kLocal);
    EXPECT_FALSE(refused.ok()) << bad;
  }
}

}  // namespace
}  // namespace dq::prefill
