#include "common/thread_pool.h"

#include <algorithm>

namespace dq {

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

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= num_chunks_) break;
    const int64_t begin = c * chunk_size_;
    (*body_)(begin, std::min(n_, begin + chunk_size_));
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
    RunChunks();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
  chunk_size_ = std::max(grain, (n + target_chunks - 1) / target_chunks);
  num_chunks_ = (n + chunk_size_ - 1) / chunk_size_;
  n_ = n;
  body_ = &body;
  next_chunk_.store(0);
  pending_.store(num_threads_ - 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  RunChunks();
  // Spin briefly, then yield: on an oversubscribed machine the worker we wait for may need
  // this core.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
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
