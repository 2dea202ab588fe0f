// ThreadPool: every index of every loop runs exactly once, across many back-to-back loops of
// varying sizes (the pattern decode produces: hundreds of short loops per token). A worker that
// wakes late must never claim a chunk of a loop that is being set up.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace dq {
namespace {

TEST(ThreadPoolTest, BackToBackLoopsRunEveryIndexExactlyOnce) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> hits(4096);
    for (int loop = 0; loop < 3000; ++loop) {
      const int64_t n = 1 + (loop * 7919) % 4096;  // sizes vary; some take the serial path
      const int64_t grain = 1 + loop % 64;
      for (int64_t i = 0; i < n; ++i) hits[i].store(0, std::memory_order_relaxed);
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LE(begin, end);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " loop " << loop << " i " << i;
      }
    }
  }
}

TEST(ThreadPoolTest, SingleThreadAndEmptyLoops) {
  ThreadPool pool(1);
  int64_t sum = 0;
  pool.ParallelFor(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum, 4950);
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { FAIL() << "empty loop ran"; });
}

}  // namespace
}  // namespace dq
