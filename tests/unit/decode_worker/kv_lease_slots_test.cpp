// A hybrid model's state slots through the decode worker's lease table: every lease takes one
// (zeroed) with its blocks, the commit hands it to the decoder, and every way a lease ends
// (release committed or not, by request, ttl reclaim, expiry found at Commit) frees it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "decode_worker/kv_lease_table.h"

namespace dq {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

KvCacheOptions HybridPool(int slots) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 1;
  o.block_size = 16;
  o.num_blocks = 64;
  o.state_slot_floats = 5;
  o.num_state_slots = slots;
  return o;
}

class KvLeaseSlotsTest : public ::testing::Test {
 protected:
  KvBlockPool pool_{HybridPool(3)};
  KvLeaseTable::TimePoint now_{};
  KvLeaseTable table_{pool_, [this] { return now_; }};
  const StateSlotPool& slots() const { return pool_.state_slots(); }
};

TEST_F(KvLeaseSlotsTest, ReserveWriteCommitReleaseHandsTheSlotThroughAndBack) {
  auto lease = table_.Reserve("r", 20, milliseconds(1000));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_GE(lease->state_slot, 0);
  EXPECT_EQ(slots().num_free(), 2);
  EXPECT_EQ(table_.stats().free_state_slots, 2);
  EXPECT_EQ(table_.stats().total_state_slots, 3);
  // What a prefill worker writes into the registered slot is what the decoder reads.
  float* slot = pool_.state_slots().slot(lease->state_slot);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(slot[i], 0.0f);
  for (int i = 0; i < 5; ++i) slot[i] = 1.5f + i;
  auto seq = table_.Commit(lease->lease_id, 20);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(seq->state_slot, lease->state_slot);
  EXPECT_EQ(pool_.state_slots().slot(seq->state_slot)[4], 5.5f);
  ASSERT_TRUE(table_.Release(lease->lease_id).ok());
  EXPECT_EQ(slots().num_free(), 3);
  // The next lease gets a zeroed slot, never the previous sequence's state.
  auto next = table_.Reserve("r2", 20, milliseconds(1000));
  ASSERT_TRUE(next.ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(pool_.state_slots().slot(next->state_slot)[i], 0.0f);
}

TEST_F(KvLeaseSlotsTest, EveryEarlyEndingFreesTheSlot) {
  auto a = table_.Reserve("released", 16, milliseconds(100));
  auto b = table_.Reserve("by-request", 16, milliseconds(100));
  auto c = table_.Reserve("reclaimed", 16, milliseconds(100));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(slots().num_free(), 0);
  ASSERT_TRUE(table_.ReleaseUncommitted(a->lease_id).ok());
  ASSERT_TRUE(table_.ReleaseUncommittedRequest("by-request").ok());
  EXPECT_EQ(slots().num_free(), 2);
  now_ += milliseconds(100);
  EXPECT_EQ(table_.ReclaimExpired(), 1);
  EXPECT_EQ(slots().num_free(), 3);
  // Expiry found at Commit reclaims it too.
  auto d = table_.Reserve("late", 16, milliseconds(10));
  ASSERT_TRUE(d.ok());
  now_ += milliseconds(10);
  EXPECT_FALSE(table_.Commit(d->lease_id, 16).ok());
  EXPECT_EQ(slots().num_free(), 3);
  EXPECT_EQ(pool_.num_free_blocks(), 64);
}

TEST_F(KvLeaseSlotsTest, NoFreeSlotIsResourceExhaustedAndTakesNoBlocks) {
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(table_.Reserve(absl::StrCat("r", i), 16, milliseconds(50)).ok());
  const int free_blocks = pool_.num_free_blocks();
  EXPECT_FALSE(table_.can_reserve(16));
  auto refused = table_.Reserve("one-too-many", 16, milliseconds(50));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("all 3 recurrent state slots are in use"));
  EXPECT_EQ(pool_.num_free_blocks(), free_blocks);
  // Expired leases are reclaimed before a Reserve gives up on slots.
  now_ += milliseconds(50);
  EXPECT_TRUE(table_.Reserve("after-expiry", 16, milliseconds(50)).ok());
  EXPECT_EQ(slots().num_free(), 2);
}

TEST(KvLeaseNoSlotsTest, APureAttentionPoolGivesNoSlot) {
  KvCacheOptions o = HybridPool(0);
  o.state_slot_floats = 0;
  KvBlockPool pool(o);
  KvLeaseTable table(pool);
  auto lease = table.Reserve("r", 16, milliseconds(1000));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->state_slot, -1);
  EXPECT_EQ(table.Commit(lease->lease_id, 16)->state_slot, -1);
  EXPECT_EQ(table.stats().total_state_slots, 0);
}

}  // namespace
}  // namespace dq
