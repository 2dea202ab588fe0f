#include "common/thread_pool.h"

#include <algorithm>

namespace dq {
namespace {
// Chunk index of a loop that is being set up: larger than any real chunk count.
constexpr uint64_t kClosed = 0xffffffffu;
}  // namespace

int DefaultThreadCount() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(uint64_t gen) {
  for (;;) {
    uint64_t w = work_.load(std::memory_order_acquire);
    if ((w >> 32) != (gen & 0xffffffffu)) return;  // a newer loop: ours is fully claimed
    const int64_t c = static_cast<int64_t>(w & 0xffffffffu);
    if (c >= num_chunks_.load(std::memory_order_relaxed)) return;
    if (!work_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) continue;
    const int64_t size = chunk_size_.load(std::memory_order_relaxed);
    const int64_t begin = c * size;
    (*body_.load(std::memory_order_relaxed))(
        begin, std::min(n_.load(std::memory_order_relaxed), begin + size));
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin first: the next loop usually follows within microseconds.
    for (int spins = 0; generation_.load(std::memory_order_acquire) == seen && spins < 4000;
         ++spins) {
      if (spins < 2000) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    RunChunks(seen);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || n <= grain) {
    body(0, n);
    return;
  }
  // A few chunks per thread balance uneven rows without much scheduling cost.
  const int64_t target_chunks = static_cast<int64_t>(num_threads_) * 4;
  const int64_t chunk_size = std::max(grain, (n + target_chunks - 1) / target_chunks);
  const int64_t num_chunks = (n + chunk_size - 1) / chunk_size;
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  // Close the previous loop first: a worker still holding its (generation, chunk) word must not
  // be able to claim a chunk while the fields below change (it would run the new body with a
  // stale chunk index and count a chunk the new loop never had).
  work_.store(((gen & 0xffffffffu) << 32) | kClosed, std::memory_order_seq_cst);
  // Publish the loop, then open it: a worker that sees the open work_ sees the fields.
  chunk_size_.store(chunk_size, std::memory_order_relaxed);
  num_chunks_.store(num_chunks, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  body_.store(&body, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  work_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  RunChunks(gen);
  // Wait for chunks still running on workers; never for idle or descheduled workers.
  for (int spins = 0; done_.load(std::memory_order_acquire) != num_chunks; ++spins) {
    if (spins < 2000) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace dq
