// PrefixAffinity: the worker remembered for a prompt's longest leading run of full blocks, only
// among eligible workers; chains depend on every token and their order; the oldest chains go
// beyond the capacity. PickLeastLoaded's preference holds within the load slack.
#include "router/prefix_affinity.h"

#include <gtest/gtest.h>

#include <vector>

#include "router/worker_registry.h"

namespace dq::router {
namespace {

std::vector<int32_t> Seq(int n, int32_t first) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

auto Any() {
  return [](std::string_view) { return true; };
}

TEST(PrefixAffinity, FindsTheWorkerOfTheLongestRememberedPrefix) {
  PrefixAffinity a;
  const std::vector<int32_t> turn1 = Seq(40, 1);  // 2 full blocks of 16
  a.Record("w1", turn1, 16);
  std::vector<int32_t> turn2 = turn1;
  for (int i = 0; i < 30; ++i) turn2.push_back(900 + i);
  auto m = a.Longest(turn2, 16, Any());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->worker, "w1");
  EXPECT_EQ(m->blocks, 2);
  // A longer prefix remembered on another worker wins.
  a.Record("w2", std::span(turn2).first(64), 16);
  m = a.Longest(turn2, 16, Any());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->worker, "w2");
  EXPECT_EQ(m->blocks, 4);
  // A chain belongs to the worker that was given it last (w2 now holds turn 1's blocks too),
  // and a worker that is not eligible (down, or no prefix cache) is not named.
  m = a.Longest(std::span(turn2).first(40), 16, Any());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->worker, "w2");
  EXPECT_FALSE(a.Longest(turn2, 16, [](std::string_view w) { return w != "w2"; }).has_value());
  // A prompt that differs in its first block matches nothing; shorter than a block neither.
  std::vector<int32_t> other = turn2;
  other[3] = 77777;
  EXPECT_FALSE(a.Longest(other, 16, Any()).has_value());
  EXPECT_FALSE(a.Longest(Seq(15, 1), 16, Any()).has_value());
  EXPECT_NE(BlockChainHashes(Seq(16, 1), 16), BlockChainHashes(Seq(16, 2), 16));
}

TEST(PrefixAffinity, ForgetsTheLeastRecentlyUsedBeyondItsCapacity) {
  PrefixAffinity a(4);
  a.Record("w1", Seq(32, 1), 16);    // 2 chains
  a.Record("w2", Seq(32, 500), 16);  // 2 more
  EXPECT_EQ(a.size(), 4u);
  ASSERT_TRUE(a.Longest(Seq(32, 1), 16, Any()).has_value());  // touches w1's longest chain
  a.Record("w3", Seq(16, 900), 16);                           // evicts the oldest: w1's first
  EXPECT_EQ(a.size(), 4u);
  EXPECT_FALSE(a.Longest(Seq(16, 1), 16, Any()).has_value());  // w1's one-block chain: gone
  EXPECT_TRUE(a.Longest(Seq(32, 1), 16, Any()).has_value());   // its two-block chain: kept
  EXPECT_TRUE(a.Longest(Seq(32, 500), 16, Any()).has_value());
}

TEST(PickLeastLoadedTest, APreferredWorkerWinsWithinTheSlack) {
  std::vector<WorkerStatus> ws(3);
  for (auto& w : ws) w.handshaken = w.layout_ok = w.serving = true;
  ws[0].running = 2;
  ws[1].running = 2 + kAffinitySlack;
  ws[2].running = 3 + kAffinitySlack;
  EXPECT_EQ(PickLeastLoaded(ws, 0), 0u);
  EXPECT_EQ(PickLeastLoaded(ws, 0, 1), 1u);  // within the slack
  EXPECT_EQ(PickLeastLoaded(ws, 0, 2), 0u);  // beyond it
  ws[1].serving = false;
  EXPECT_EQ(PickLeastLoaded(ws, 0, 1), 0u);  // not live
}

}  // namespace
}  // namespace dq::router
