#include "decode_worker/kv_lease_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dq {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kBlockSize = 16;

KvCacheOptions SmallPool(int num_blocks) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 1;
  o.block_size = kBlockSize;
  o.num_blocks = num_blocks;
  return o;
}

// A hand-driven clock so TTL tests need no sleeping.
struct FakeClock {
  KvLeaseTable::TimePoint now{};
  std::function<KvLeaseTable::TimePoint()> fn() {
    return [this] { return now; };
  }
};

class KvLeaseTableTest : public ::testing::Test {
 protected:
  KvBlockPool pool_{SmallPool(32)};
  FakeClock clock_;
  KvLeaseTable table_{pool_, clock_.fn()};
};

TEST(BlockRunsTest, SplitsIntoMaximalRuns) {
  EXPECT_TRUE(ToBlockRuns({}).empty());
  EXPECT_THAT(ToBlockRuns({3}), ElementsAre(BlockRun{3, 1}));
  EXPECT_THAT(ToBlockRuns({0, 1, 2, 5, 6, 9}),
              ElementsAre(BlockRun{0, 3}, BlockRun{5, 2}, BlockRun{9, 1}));
}

// A lease id is the handle Release and Commit act on: 128 random bits, so that nobody derives
// another request's lease from their own (ids used to be "lease-1", "lease-2", ...).
TEST_F(KvLeaseTableTest, LeaseIdsAreUnguessable) {
  std::set<std::string> ids;
  for (int i = 0; i < 200; ++i) {
    auto lease = table_.Reserve(absl::StrCat("req-", i), 1, milliseconds(500));
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_EQ(lease->lease_id.size(), 6u + 32u) << lease->lease_id;
    EXPECT_EQ(lease->lease_id.substr(0, 6), "lease-");
    EXPECT_EQ(lease->lease_id.find_first_not_of("0123456789abcdef", 6), std::string::npos);
    ids.insert(lease->lease_id);
    ASSERT_TRUE(table_.Release(lease->lease_id).ok());
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(ids.count("lease-1") + ids.count("lease-2"), 0u);
}

TEST_F(KvLeaseTableTest, ReserveCommitReleaseRestoresPool) {
  const int start = pool_.num_free_blocks();
  ASSERT_TRUE(table_.can_reserve(40));
  auto lease = table_.Reserve("req-1", 40, milliseconds(500));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->request_id, "req-1");
  EXPECT_EQ(lease->blocks.size(), 3u);  // 40 tokens / 16 per block, rounded up
  EXPECT_EQ(lease->expires_at, clock_.now + milliseconds(500));
  EXPECT_EQ(pool_.num_free_blocks(), start - 3);
  EXPECT_EQ(table_.stats().leases_active, 1);
  EXPECT_EQ(table_.stats().blocks_leased, 3);

  auto seq = table_.Commit(lease->lease_id, 37);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(seq->blocks, lease->blocks);
  EXPECT_EQ(seq->num_tokens, 37);
  EXPECT_EQ(table_.stats().leases_active, 0);
  EXPECT_EQ(table_.stats().leases_committed, 1);

  ASSERT_TRUE(table_.Release(lease->lease_id).ok());
  EXPECT_EQ(pool_.num_free_blocks(), start);
  const KvLeaseStats s = table_.stats();
  EXPECT_EQ(s.leases_active + s.leases_committed + s.blocks_leased, 0);
}

TEST_F(KvLeaseTableTest, ReleaseByRequestIdFreesBlocks) {
  auto lease = table_.Reserve("req-1", 16, milliseconds(500));
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(table_.ReleaseRequest("req-1").ok());
  EXPECT_EQ(pool_.num_free_blocks(), 32);
  EXPECT_EQ(table_.ReleaseRequest("req-1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table_.Release(lease->lease_id).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(KvLeaseTableTest, RejectsBadReservations) {
  EXPECT_EQ(table_.Reserve("req-1", 0, milliseconds(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_.Reserve("", 5, milliseconds(10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table_.Reserve("req-1", 5, milliseconds(10)).ok());
  auto dup = table_.Reserve("req-1", 5, milliseconds(10));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(pool_.num_free_blocks(), 31);  // the duplicate took nothing
}

TEST_F(KvLeaseTableTest, ContiguousRunsReportedAndAfterFragmentation) {
  auto a = table_.Reserve("a", 2 * kBlockSize, milliseconds(100));  // blocks 0-1
  auto b = table_.Reserve("b", 3 * kBlockSize, milliseconds(100));  // blocks 2-4
  auto c = table_.Reserve("c", 2 * kBlockSize, milliseconds(100));  // blocks 5-6
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_THAT(a->runs, ElementsAre(BlockRun{0, 2}));
  EXPECT_THAT(b->runs, ElementsAre(BlockRun{2, 3}));
  EXPECT_THAT(c->runs, ElementsAre(BlockRun{5, 2}));

  // Free the holes 0-1 and 5-6; the next lease fills them lowest first, then continues at 7.
  ASSERT_TRUE(table_.Release(a->lease_id).ok());
  ASSERT_TRUE(table_.Release(c->lease_id).ok());
  auto d = table_.Reserve("d", 6 * kBlockSize, milliseconds(100));
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(d->blocks, ElementsAre(0, 1, 5, 6, 7, 8));
  EXPECT_THAT(d->runs, ElementsAre(BlockRun{0, 2}, BlockRun{5, 4}));
}

TEST_F(KvLeaseTableTest, ReclaimsOnlyUncommittedExpiredLeases) {
  auto committed = table_.Reserve("committed", 16, milliseconds(100));
  auto stale = table_.Reserve("stale", 32, milliseconds(100));
  auto fresh = table_.Reserve("fresh", 16, milliseconds(1000));
  ASSERT_TRUE(committed.ok() && stale.ok() && fresh.ok());
  ASSERT_TRUE(table_.Commit(committed->lease_id, 16).ok());

  EXPECT_EQ(table_.ReclaimExpired(clock_.now + milliseconds(99)), 0);
  clock_.now += milliseconds(100);
  EXPECT_EQ(table_.ReclaimExpired(), 1);  // only "stale": committed is exempt, fresh is not due
  EXPECT_EQ(pool_.num_free_blocks(), 32 - 2);
  EXPECT_EQ(table_.stats().reclaimed_total, 1);
  EXPECT_EQ(table_.stats().leases_active, 1);
  EXPECT_EQ(table_.stats().leases_committed, 1);
  EXPECT_TRUE(table_.Find(committed->lease_id).ok());
  EXPECT_TRUE(table_.Find(fresh->lease_id).ok());
  // The request id is free again once its lease was reclaimed.
  EXPECT_TRUE(table_.Reserve("stale", 16, milliseconds(100)).ok());
}

TEST_F(KvLeaseTableTest, CommitAfterExpiryFailsClearly) {
  auto lease = table_.Reserve("req-1", 16, milliseconds(100));
  ASSERT_TRUE(lease.ok());
  clock_.now += milliseconds(150);
  EXPECT_EQ(table_.ReclaimExpired(), 1);
  auto commit = table_.Commit(lease->lease_id, 16);
  EXPECT_EQ(commit.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(commit.status().message(), HasSubstr("expired"));
  EXPECT_THAT(commit.status().message(), HasSubstr("reclaimed"));
  EXPECT_EQ(pool_.num_free_blocks(), 32);
}

TEST_F(KvLeaseTableTest, CommitPastTtlBeforeReclaimSweepAlsoFails) {
  auto lease = table_.Reserve("req-1", 16, milliseconds(100));
  ASSERT_TRUE(lease.ok());
  clock_.now += milliseconds(100);
  auto commit = table_.Commit(lease->lease_id, 16);
  EXPECT_THAT(commit.status().message(), HasSubstr("expired"));
  EXPECT_EQ(pool_.num_free_blocks(), 32);
  EXPECT_EQ(table_.stats().reclaimed_total, 1);
  EXPECT_EQ(table_.ReclaimExpired(), 0);
}

TEST_F(KvLeaseTableTest, CommitValidatesTokensAndLease) {
  auto lease = table_.Reserve("req-1", 20, milliseconds(100));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(table_.Commit(lease->lease_id, 21).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_.Commit("lease-nope", 1).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table_.Commit(lease->lease_id, 20).ok());
  EXPECT_EQ(table_.Commit(lease->lease_id, 20).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(KvLeaseTableTest, DoubleReleaseIsAnErrorNotADoubleFree) {
  auto a = table_.Reserve("a", 16, milliseconds(100));
  auto b = table_.Reserve("b", 16, milliseconds(100));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(table_.Release(a->lease_id).ok());
  const absl::Status again = table_.Release(a->lease_id);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.message(), HasSubstr("already released"));
  EXPECT_EQ(pool_.num_free_blocks(), 31);  // b still holds its block
  EXPECT_EQ(table_.stats().blocks_leased, 1);
}

TEST_F(KvLeaseTableTest, ReserveBeyondCapacityIsResourceExhausted) {
  EXPECT_FALSE(table_.can_reserve(33 * kBlockSize));
  auto big = table_.Reserve("big", 33 * kBlockSize, milliseconds(100));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("33 KV blocks"));
  EXPECT_THAT(big.status().message(), HasSubstr("32 are free"));
  ASSERT_TRUE(table_.Reserve("most", 30 * kBlockSize, milliseconds(100)).ok());
  EXPECT_EQ(table_.Reserve("more", 3 * kBlockSize, milliseconds(100)).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_.num_free_blocks(), 2);
}

TEST_F(KvLeaseTableTest, ReserveReclaimsExpiredLeasesWhenFull) {
  ASSERT_TRUE(table_.Reserve("old", 32 * kBlockSize, milliseconds(100)).ok());
  clock_.now += milliseconds(100);
  EXPECT_TRUE(table_.Reserve("new", kBlockSize, milliseconds(100)).ok());
  EXPECT_EQ(table_.stats().reclaimed_total, 1);
}

TEST_F(KvLeaseTableTest, FreeHookSeesEveryLeaseBeforeItsBlocksReturn) {
  std::vector<std::string> freed;
  table_.set_free_hook([&](const KvLease& l) {
    // The blocks are still taken while the hook runs (regions go before blocks).
    EXPECT_LT(pool_.num_free_blocks(), 32);
    freed.push_back(l.lease_id);
  });
  auto released = table_.Reserve("released", 10, milliseconds(100));
  auto expired = table_.Reserve("expired", 10, milliseconds(100));
  auto committed = table_.Reserve("committed", 10, milliseconds(100));
  ASSERT_TRUE(released.ok() && expired.ok() && committed.ok());
  ASSERT_TRUE(table_.Commit(committed->lease_id, 5).ok());
  ASSERT_TRUE(table_.Release(released->lease_id).ok());
  clock_.now += milliseconds(100);
  EXPECT_EQ(table_.ReclaimExpired(), 1);
  ASSERT_TRUE(table_.Release(committed->lease_id).ok());
  EXPECT_THAT(freed, ElementsAre(released->lease_id, expired->lease_id, committed->lease_id));
  EXPECT_EQ(pool_.num_free_blocks(), 32);
}

TEST_F(KvLeaseTableTest, ReleaseUncommittedLeavesDecodingLeasesAlone) {
  auto open = table_.Reserve("open", 10, milliseconds(100));
  auto decoding = table_.Reserve("decoding", 10, milliseconds(100));
  ASSERT_TRUE(open.ok() && decoding.ok());
  ASSERT_TRUE(table_.Commit(decoding->lease_id, 5).ok());
  absl::Status s = table_.ReleaseUncommitted(decoding->lease_id);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("abort the request instead"));
  EXPECT_EQ(table_.ReleaseUncommittedRequest("decoding").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_.ReleaseUncommittedRequest("open").ok());
  EXPECT_EQ(table_.ReleaseUncommitted(open->lease_id).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_.stats().leases_committed, 1);
  EXPECT_EQ(table_.stats().free_blocks, 31);
  EXPECT_EQ(table_.stats().total_blocks, 32);
  EXPECT_TRUE(table_.Release(decoding->lease_id).ok());
}

TEST(KvLeaseTableConcurrencyTest, ConcurrentReserveReleaseKeepsCountsConsistent) {
  KvBlockPool pool(SmallPool(12));  // small, so threads contend for blocks
  KvLeaseTable table(pool);
  constexpr int kThreads = 8;
  constexpr int kIterations = 500;
  std::atomic<int> exhausted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const std::string id = absl::StrCat("t", t, "-", i);
        // Up to 7 blocks each, and now and then more than the whole pool, so the exhausted path
        // runs under contention in every run (not just when threads happen to collide).
        const int tokens = i % 50 == 49 ? 13 * kBlockSize : 1 + (i * 7 + t) % 100;
        auto lease = table.Reserve(id, tokens, std::chrono::seconds(60));
        if (!lease.ok()) {
          ASSERT_EQ(lease.status().code(), absl::StatusCode::kResourceExhausted);
          ++exhausted;
          continue;
        }
        if (i % 2 == 0) {
          ASSERT_TRUE(table.Commit(lease->lease_id, 1).ok());
        }
        if (i % 3 == 0) {
          ASSERT_TRUE(table.ReleaseRequest(id).ok());
        } else {
          ASSERT_TRUE(table.Release(lease->lease_id).ok());
        }
        EXPECT_FALSE(table.Release(lease->lease_id).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  const KvLeaseStats s = table.stats();
  EXPECT_EQ(s.leases_active, 0);
  EXPECT_EQ(s.leases_committed, 0);
  EXPECT_EQ(s.blocks_leased, 0);
  EXPECT_EQ(pool.num_free_blocks(), 12);
  EXPECT_GE(exhausted.load(), kThreads * (kIterations / 50));
}

}  // namespace
}  // namespace dq

namespace dq {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

// With the prefix cache on: a finished lease published with its tokens lends its full blocks to
// a later prompt that starts with them (KvLease::cached_tokens, the same block ids first), never
// the block holding that prompt's last token; releases return every block; without the cache
// nothing is shared.
TEST_F(KvLeaseTableTest, PrefixCacheLendsPublishedBlocksToALaterPrompt) {
  table_.set_prefix_cache(true);
  const int start = pool_.num_free_blocks();
  const std::vector<int32_t> turn1 = Tokens(40, 100);  // 2 full blocks + 8
  auto a = table_.Reserve("a", 64, milliseconds(1000), turn1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->cached_tokens, 0);
  ASSERT_TRUE(table_.Commit(a->lease_id, 40).ok());
  std::vector<int32_t> with_answer = turn1;
  for (int i = 0; i < 10; ++i) with_answer.push_back(7 + i);  // 50 tokens in KV: 3 full blocks
  ASSERT_TRUE(table_.ReleaseAndPublish(a->lease_id, with_answer).ok());
  EXPECT_EQ(pool_.num_free_blocks(), start);  // cached blocks are evictable
  EXPECT_EQ(table_.stats().prefix.cached_blocks, 3);

  std::vector<int32_t> turn2 = with_answer;
  for (int i = 0; i < 20; ++i) turn2.push_back(500 + i);
  auto b = table_.Reserve("b", 90, milliseconds(1000), turn2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->cached_tokens, 48);
  ASSERT_GE(b->blocks.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(b->blocks.begin(), b->blocks.begin() + 3),
            std::vector<int32_t>(a->blocks.begin(), a->blocks.begin() + 3));
  EXPECT_EQ(static_cast<int>(b->blocks.size()), pool_.BlocksFor(90));
  // A prompt that is exactly the cached tokens keeps its last block to be written.
  auto c = table_.Reserve("c", 64, milliseconds(1000), std::span(with_answer).first(48));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cached_tokens, 32);
  ASSERT_TRUE(table_.Release(b->lease_id).ok());
  ASSERT_TRUE(table_.Release(c->lease_id).ok());
  EXPECT_EQ(pool_.num_free_blocks(), start);
  EXPECT_GT(table_.stats().prefix.hit_blocks, 0);

  KvBlockPool other_pool(SmallPool(32));
  KvLeaseTable off(other_pool);
  auto d = off.Reserve("d", 64, milliseconds(1000), turn1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cached_tokens, 0);
  ASSERT_TRUE(off.Commit(d->lease_id, 40).ok());
  ASSERT_TRUE(off.ReleaseAndPublish(d->lease_id, turn1).ok());
  EXPECT_EQ(off.stats().prefix.cached_blocks, 0);
}

// A Reserve that cannot get its fresh blocks gives the cached ones back.
TEST_F(KvLeaseTableTest, PrefixCacheRefusalKeepsNoReference) {
  table_.set_prefix_cache(true);
  const std::vector<int32_t> prompt = Tokens(40, 1);
  auto a = table_.Reserve("a", 40, milliseconds(1000), prompt);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(table_.Commit(a->lease_id, 40).ok());
  ASSERT_TRUE(table_.ReleaseAndPublish(a->lease_id, prompt).ok());
  const int free = pool_.num_free_blocks();
  auto big = table_.Reserve("big", 33 * kBlockSize, milliseconds(1000), prompt);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool_.num_free_blocks(), free);
  for (int32_t b : a->blocks) EXPECT_EQ(pool_.refcount(b), 0);
}

}  // namespace
}  // namespace dq
