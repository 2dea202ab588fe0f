// Prefix caching in KvBlockPool: refcounts, publish/acquire by the hash chain of a block's
// tokens, LRU eviction of unreferenced cached blocks, truncation into a cached block.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "engine/kvcache/kv_block_pool.h"

namespace dq {
namespace {

KvCacheOptions Pool(int blocks) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 2;
  o.block_size = 4;
  o.num_blocks = blocks;
  o.host_storage = false;
  return o;
}

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A sequence holding `tokens` (allocated, as a prefill would leave it).
KvSequence Prefilled(KvBlockPool& pool, const std::vector<int32_t>& tokens) {
  KvSequence seq;
  pool.extend(seq, static_cast<int>(tokens.size()));
  seq.num_tokens = static_cast<int>(tokens.size());
  return seq;
}

TEST(PrefixCacheTest, APublishedPrefixIsSharedByRefcountAndStaysCachedWhenFree) {
  KvBlockPool pool(Pool(8));
  const std::vector<int32_t> prompt = Tokens(10, 100);  // two full blocks and a partial one
  KvSequence first = Prefilled(pool, prompt);
  pool.Publish(first, prompt);
  EXPECT_EQ(pool.prefix_stats().cached_blocks, 2);  // the partial block is not published
  pool.release(first);
  EXPECT_EQ(pool.num_free_blocks(), 8);  // cached blocks count as free: evictable
  EXPECT_EQ(pool.CachedPrefixBlocks(prompt), 2);

  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {7, 7, 7});
  const std::vector<int32_t> shared = pool.AcquirePrefix(longer);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(pool.refcount(shared[0]), 1);
  const std::vector<int32_t> again = pool.AcquirePrefix(prompt);
  EXPECT_EQ(again, shared);
  EXPECT_EQ(pool.refcount(shared[0]), 2);
  EXPECT_EQ(pool.num_free_blocks(), 6);
  pool.free(again);
  pool.free(shared);
  EXPECT_EQ(pool.refcount(shared[0]), 0);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  const PrefixCacheStats s = pool.prefix_stats();
  EXPECT_EQ(s.queried_blocks, 3 + 2);
  EXPECT_EQ(s.hit_blocks, 2 + 2);
}

TEST(PrefixCacheTest, OnlyTheSamePrefixMatches) {
  KvBlockPool pool(Pool(8));
  const std::vector<int32_t> prompt = Tokens(8, 0);
  KvSequence seq = Prefilled(pool, prompt);
  pool.Publish(seq, prompt);
  pool.release(seq);
  // The same second block after another first block is another prefix.
  std::vector<int32_t> other = prompt;
  other[0] = 99;
  EXPECT_EQ(pool.CachedPrefixBlocks(other), 0);
  std::vector<int32_t> tail_differs = prompt;
  tail_differs[7] = 99;
  EXPECT_EQ(pool.CachedPrefixBlocks(tail_differs), 1);
  EXPECT_EQ(pool.CachedPrefixBlocks(std::vector<int32_t>(prompt.begin(), prompt.begin() + 3)), 0);
}

TEST(PrefixCacheTest, AllocationEvictsTheLeastRecentlyUsedCachedBlocksAfterFreeOnes) {
  KvBlockPool pool(Pool(4));
  const std::vector<int32_t> a = Tokens(4, 0), b = Tokens(4, 50);
  KvSequence sa = Prefilled(pool, a), sb = Prefilled(pool, b);
  pool.Publish(sa, a);
  pool.Publish(sb, b);
  pool.release(sa);  // a is older
  pool.release(sb);
  // Two free blocks first: nothing evicted.
  std::vector<int32_t> fresh = pool.allocate(2);
  EXPECT_EQ(pool.prefix_stats().evicted_blocks, 0);
  EXPECT_EQ(pool.CachedPrefixBlocks(a), 1);
  // Then the least recently used cached block: a's.
  std::vector<int32_t> more = pool.allocate(1);
  EXPECT_EQ(pool.prefix_stats().evicted_blocks, 1);
  EXPECT_EQ(pool.CachedPrefixBlocks(a), 0);
  EXPECT_EQ(pool.CachedPrefixBlocks(b), 1);
  // A block in use is never evicted.
  const std::vector<int32_t> held = pool.AcquirePrefix(b);
  EXPECT_FALSE(pool.can_allocate(1));
  pool.free(held);
  EXPECT_TRUE(pool.can_allocate(1));
  pool.free(fresh);
  pool.free(more);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(PrefixCacheTest, TruncatingIntoACachedBlockUncachesIt) {
  KvBlockPool pool(Pool(4));
  const std::vector<int32_t> prompt = Tokens(8, 0);
  KvSequence seq = Prefilled(pool, prompt);
  pool.Publish(seq, prompt);
  pool.truncate(seq, 6);  // the second block will be rewritten from slot 2
  EXPECT_EQ(pool.CachedPrefixBlocks(prompt), 1);
  pool.release(seq);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(PrefixCacheTest, ContentAlreadyCachedIsNotCachedTwice) {
  KvBlockPool pool(Pool(4));
  const std::vector<int32_t> prompt = Tokens(4, 0);
  KvSequence one = Prefilled(pool, prompt), two = Prefilled(pool, prompt);
  pool.Publish(one, prompt);
  pool.Publish(two, prompt);
  EXPECT_EQ(pool.prefix_stats().cached_blocks, 1);
  pool.release(one);
  pool.release(two);
  EXPECT_EQ(pool.prefix_stats().cached_blocks, 1);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

// Random publish / acquire / allocate / free: every block is always exactly one of in use,
// cached-and-unreferenced, or free, and everything returns when all is released.
TEST(PrefixCacheTest, RandomTrafficKeepsTheAccountsExact) {
  std::mt19937 rng(7);
  KvBlockPool pool(Pool(16));
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p = Tokens(12, 0);  // a shared system prompt of three blocks
    for (int j = 0; j < 4 + i * 3; ++j) p.push_back(static_cast<int32_t>(rng() % 5));
    prompts.push_back(p);
  }
  std::vector<KvSequence> live;
  int hits = 0;
  for (int step = 0; step < 2000; ++step) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 3)) {
      const size_t i = rng() % live.size();
      pool.release(live[i]);
      live.erase(live.begin() + static_cast<long>(i));
      continue;
    }
    const std::vector<int32_t>& p = prompts[rng() % prompts.size()];
    KvSequence seq;
    seq.blocks = pool.AcquirePrefix(p);
    hits += static_cast<int>(seq.blocks.size());
    const int need =
        pool.BlocksFor(static_cast<int>(p.size())) - static_cast<int>(seq.blocks.size());
    if (!pool.can_allocate(need)) {
      pool.free(seq.blocks);
      continue;
    }
    pool.extend(seq, static_cast<int>(p.size()));
    seq.num_tokens = static_cast<int>(p.size());
    pool.Publish(seq, p);
    live.push_back(seq);
  }
  EXPECT_GT(hits, 1000);
  EXPECT_GT(pool.prefix_stats().evicted_blocks, 0);
  for (KvSequence& s : live) pool.release(s);
  EXPECT_EQ(pool.num_free_blocks(), 16);
  for (int32_t b = 0; b < 16; ++b) EXPECT_EQ(pool.refcount(b), 0) << b;
}

}  // namespace
}  // namespace dq
