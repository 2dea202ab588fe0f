// A fixed pool of worker threads for data-parallel loops on the CPU backend.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dq {

// Runs ParallelFor bodies on `num_threads` threads (the caller is one of them). Workers spin
// briefly before sleeping, because decode issues hundreds of short loops per token and a
// condition-variable wake-up per loop would cost more than the loop. Chunks are claimed, not
// assigned, and the caller waits only for the chunks to finish, never for a worker to check in:
// on an oversubscribed machine a descheduled worker costs nothing, the caller does its share.
// Not reentrant: one ParallelFor at a time per pool.
class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Splits [0, n) into contiguous chunks, at least `grain` items each, and calls
  // body(begin, end) for each chunk; returns when all chunks are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body);

 private:
  void WorkerLoop(int index);
  // Claims and runs chunks of loop `gen` until none are left or a newer loop has started.
  void RunChunks(uint64_t gen);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // bumped once per ParallelFor; wakes the workers
  std::atomic<uint64_t> work_{0};        // (generation << 32) | next unclaimed chunk
  std::atomic<int64_t> done_{0};         // chunks of the current loop finished
  std::atomic<int64_t> num_chunks_{0};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> chunk_size_{0};
  std::atomic<const std::function<void(int64_t, int64_t)>*> body_{nullptr};
  bool stop_ = false;
};

// Threads to use by default: the machine's hardware threads.
int DefaultThreadCount();

}  // namespace dq
