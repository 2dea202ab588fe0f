#include "worker_common/completion_thread.h"

namespace dq::worker {

CompletionThread::CompletionThread(std::function<void()> thread_init)
    : thread_([this, init = std::move(thread_init)] { Loop(init); }) {}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CompletionThread::Push(std::function<absl::Status()> wait,
                            std::function<void(absl::Status)> then) {
  {
    std::lock_guard lock(mu_);
    items_.push_back({std::move(wait), std::move(then)});
  }
  cv_.notify_all();
}

void CompletionThread::Drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return items_.empty() && running_ == 0; });
}

void CompletionThread::Loop(const std::function<void()>& thread_init) {
  if (thread_init) thread_init();
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (items_.empty()) return;  // stopping, nothing left
    Item item = std::move(items_.front());
    items_.pop_front();
    ++running_;
    lock.unlock();
    absl::Status s = item.wait ? item.wait() : absl::OkStatus();
    if (item.then) item.then(std::move(s));
    lock.lock();
    --running_;
    idle_cv_.notify_all();
  }
}

}  // namespace dq::worker
