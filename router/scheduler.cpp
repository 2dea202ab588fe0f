#include "router/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/auth_and_limits.h"

namespace dq::router {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// Enough samples to smooth one slow request out, few enough to follow a change of load.
constexpr size_t kServiceTimeSamples = 32;
// Before any request has finished there is nothing to estimate from; 1 s is HTTP's minimum.
constexpr milliseconds kMinRetryAfter{1000};

}  // namespace

struct Ticket::Entry {
  enum class State { kQueued, kAdmitted, kTimedOut, kCancelled };

  RequestId id;
  Deadline deadline;
  SchedulerClock::time_point enqueued_at;
  State state = State::kQueued;
  // Waited on with Scheduler::mu_; one per entry so a wake-up reaches only its own waiter.
  std::condition_variable cv;
};

void QueueTimeHistogram::Observe(double seconds) {
  for (size_t i = 0; i < kBucketSeconds.size(); ++i) {
    if (seconds <= kBucketSeconds[i]) ++cumulative_counts[i];
  }
  ++count;
  sum_seconds += seconds;
}

// ---- Ticket ----

Ticket::Ticket(Scheduler* scheduler, std::shared_ptr<Entry> entry)
    : scheduler_(scheduler), entry_(std::move(entry)) {}

Ticket& Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (entry_) scheduler_->DropTicket(*entry_);
    scheduler_ = other.scheduler_;
    entry_ = std::move(other.entry_);
  }
  return *this;
}

Ticket::~Ticket() {
  if (entry_) scheduler_->DropTicket(*entry_);
}

absl::Status Ticket::Wait() {
  if (!entry_) return absl::FailedPreconditionError("Wait() on a moved-from scheduler ticket");
  return scheduler_->WaitFor(*entry_);
}

const RequestId& Ticket::id() const { return entry_->id; }

// ---- Scheduler ----

namespace {

// A scheduler that can never run anything would hang every request, so 0 slots means 1.
SchedulerOptions Normalized(SchedulerOptions options) {
  options.max_in_flight = std::max(options.max_in_flight, 1);
  options.max_queue = std::max(options.max_queue, 0);
  return options;
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options) : options_(Normalized(options)) {}

bool Scheduler::can_admit() const {
  std::lock_guard lock(mu_);
  return queue_.empty() && static_cast<int>(running_since_.size()) < options_.max_in_flight;
}

bool Scheduler::queue_full() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(queue_.size()) >= options_.max_queue;
}

EnqueueResult Scheduler::Enqueue(RequestId id, std::optional<Deadline> deadline) {
  const auto now = SchedulerClock::now();
  std::lock_guard lock(mu_);
  EnqueueResult result;
  if (queued_by_id_.contains(id) || running_since_.contains(id)) {
    // Two requests with one id would make Cancel/Release ambiguous; the router's ids are unique,
    // so this is a bug upstream, not the client's doing, and it is not counted as submitted.
    result.error = ApiError{409, "invalid_request_error",
                            absl::StrCat("Request id ", id, " is already queued or running."), "",
                            "duplicate_request_id"};
    return result;
  }
  ++counters_.submitted;
  // Expired entries whose waiter has not woken yet must not hold queue places.
  PurgeExpiredLocked(now);

  auto entry = std::make_shared<Ticket::Entry>();
  entry->id = id;
  entry->deadline = deadline.value_or(now + options_.default_queue_timeout);
  entry->enqueued_at = now;

  if (queue_.empty() && static_cast<int>(running_since_.size()) < options_.max_in_flight) {
    AdmitLocked(*entry, now);
  } else if (static_cast<int>(queue_.size()) >= options_.max_queue) {
    ++counters_.rejected_queue_full;
    const milliseconds retry_after = EstimatedRetryAfterLocked();
    result.error =
        RateLimited(absl::StrCat("the server's request queue is full (", options_.max_queue,
                                 " waiting, ", options_.max_in_flight, " running)"),
                    retry_after);
    result.retry_after = RetryAfterSeconds(retry_after);
    return result;
  } else {
    queue_.push_back(entry);
    queued_by_id_.emplace(entry->id, std::prev(queue_.end()));
    ++counters_.queued;
  }
  result.ticket.emplace(Ticket(this, std::move(entry)));
  return result;
}

bool Scheduler::Cancel(const RequestId& id) {
  std::lock_guard lock(mu_);
  auto it = queued_by_id_.find(id);
  if (it == queued_by_id_.end()) return false;
  RemoveQueuedLocked(**it->second, /*timed_out=*/false);
  return true;
}

bool Scheduler::Release(const RequestId& id) {
  const auto now = SchedulerClock::now();
  std::lock_guard lock(mu_);
  auto it = running_since_.find(id);
  if (it == running_since_.end()) return false;
  recent_service_times_.push_back(duration_cast<milliseconds>(now - it->second));
  if (recent_service_times_.size() > kServiceTimeSamples) recent_service_times_.pop_front();
  running_since_.erase(it);
  --counters_.in_flight;
  AdmitWaitingLocked(now);
  return true;
}

SchedulerCounters Scheduler::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

milliseconds Scheduler::EstimatedRetryAfter() const {
  std::lock_guard lock(mu_);
  return EstimatedRetryAfterLocked();
}

absl::Status Scheduler::WaitFor(Ticket::Entry& entry) {
  using State = Ticket::Entry::State;
  std::unique_lock lock(mu_);
  // Spurious wake-ups and wake-ups for others just loop; the predicate is the entry's state.
  while (entry.state == State::kQueued) {
    if (entry.cv.wait_until(lock, entry.deadline) == std::cv_status::timeout &&
        entry.state == State::kQueued) {
      RemoveQueuedLocked(entry, /*timed_out=*/true);
    }
  }
  switch (entry.state) {
    case State::kAdmitted:
      return absl::OkStatus();
    case State::kTimedOut:
      return absl::DeadlineExceededError(absl::StrCat(
          "Request ", entry.id, " waited in the router's queue until its deadline without ",
          "being admitted; the server is busy. Retry later or with a longer timeout."));
    default:
      return absl::CancelledError(
          absl::StrCat("Request ", entry.id, " was cancelled while waiting in the queue."));
  }
}

void Scheduler::DropTicket(Ticket::Entry& entry) {
  std::lock_guard lock(mu_);
  if (entry.state != Ticket::Entry::State::kQueued) return;
  // Nobody will wait on it any more; an already expired one counts as a timeout, not a cancel.
  RemoveQueuedLocked(entry, /*timed_out=*/SchedulerClock::now() >= entry.deadline);
}

void Scheduler::AdmitLocked(Ticket::Entry& entry, SchedulerClock::time_point now) {
  entry.state = Ticket::Entry::State::kAdmitted;
  running_since_.emplace(entry.id, now);
  ++counters_.admitted;
  ++counters_.in_flight;
  counters_.queue_time.Observe(std::chrono::duration<double>(now - entry.enqueued_at).count());
  entry.cv.notify_one();
}

void Scheduler::AdmitWaitingLocked(SchedulerClock::time_point now) {
  while (!queue_.empty() && static_cast<int>(running_since_.size()) < options_.max_in_flight) {
    std::shared_ptr<Ticket::Entry> head = queue_.front();
    if (now >= head->deadline) {
      // Admitting it would run work its client has already given up on.
      RemoveQueuedLocked(*head, /*timed_out=*/true);
      continue;
    }
    queued_by_id_.erase(head->id);
    queue_.pop_front();
    --counters_.queued;
    AdmitLocked(*head, now);
  }
}

void Scheduler::RemoveQueuedLocked(Ticket::Entry& entry, bool timed_out) {
  auto it = queued_by_id_.find(entry.id);
  if (it == queued_by_id_.end()) return;
  // Keep the entry alive past the erase: the list may hold the last reference.
  std::shared_ptr<Ticket::Entry> keep = *it->second;
  queue_.erase(it->second);
  queued_by_id_.erase(it);
  --counters_.queued;
  if (timed_out) {
    keep->state = Ticket::Entry::State::kTimedOut;
    ++counters_.timed_out_in_queue;
  } else {
    keep->state = Ticket::Entry::State::kCancelled;
    ++counters_.cancelled_in_queue;
  }
  keep->cv.notify_one();
}

void Scheduler::PurgeExpiredLocked(SchedulerClock::time_point now) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    auto next = std::next(it);
    if (now >= (*it)->deadline) RemoveQueuedLocked(**it, /*timed_out=*/true);
    it = next;
  }
  // A removed head may have been the only thing keeping free slots idle.
  AdmitWaitingLocked(now);
}

milliseconds Scheduler::EstimatedRetryAfterLocked() const {
  if (recent_service_times_.empty()) return kMinRetryAfter;
  milliseconds total{0};
  for (milliseconds t : recent_service_times_) total += t;
  const milliseconds mean = total / static_cast<int64_t>(recent_service_times_.size());
  // A new request gets a place once everyone ahead of it, spread over the slots, has finished.
  const int64_t ahead = static_cast<int64_t>(queue_.size()) + 1;
  const milliseconds estimate = mean * ahead / std::max(options_.max_in_flight, 1);
  return std::max(estimate, kMinRetryAfter);
}

}  // namespace dq::router
