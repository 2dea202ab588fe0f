// A thread that waits for queued asynchronous work in order and then runs its continuation:
// KvStaging::CopyOut's "post the layer once its copy is done", without blocking the engine
// thread that queued the copy.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace dq::worker {

class CompletionThread {
 public:
  // `thread_init` runs first on the new thread (e.g. selecting the CUDA device).
  explicit CompletionThread(std::function<void()> thread_init = {});
  // Runs what is queued, then joins.
  ~CompletionThread();
  CompletionThread(const CompletionThread&) = delete;
  CompletionThread& operator=(const CompletionThread&) = delete;

  // Queues `wait` (blocks until the work is done; its status goes to `then`) and `then`.
  void Push(std::function<absl::Status()> wait, std::function<void(absl::Status)> then);
  // Blocks until everything pushed so far has run.
  void Drain();

 private:
  struct Item {
    std::function<absl::Status()> wait;
    std::function<void(absl::Status)> then;
  };
  void Loop(const std::function<void()>& thread_init);

  std::mutex mu_;
  std::condition_variable cv_;       // new items or stop
  std::condition_variable idle_cv_;  // an item finished
  std::deque<Item> items_;
  int running_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dq::worker
