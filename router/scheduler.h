// The router's admission scheduler for low concurrency. A decode worker serves few requests at
// once well and many badly, so the router lets at most `max_in_flight` requests run, holds a
// bounded FIFO of the rest, and refuses beyond that with a 429 the client can act on (Retry-After)
// rather than letting latency grow without bound.
//
// Errors a waiting request can see (Ticket::Wait):
//   - absl::DeadlineExceeded when its deadline passes while still queued. We use a Status rather
//     than an ApiError because the deadline is the request's own (it crosses rooms with it);
//     FromStatus() turns it into the 504 the client sees.
//   - absl::Cancelled when the request was cancelled while queued (client gone: 499).
// A full queue is refused at Enqueue with RateLimited() (429) and a Retry-After value estimated
// from recent service times, because the client must see when to come back.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "router/api_error.h"

namespace dq::router {

using RequestId = std::string;
using SchedulerClock = std::chrono::steady_clock;
using Deadline = SchedulerClock::time_point;

struct SchedulerOptions {
  int max_in_flight = 1;  // >= 1
  int max_queue = 16;     // >= 0; 0 means "run now or refuse"
  // Used when Enqueue is given no deadline, so nothing waits in the queue forever.
  std::chrono::milliseconds default_queue_timeout{30000};
};

// Prometheus-style cumulative histogram of the time admitted requests spent queued.
struct QueueTimeHistogram {
  static constexpr std::array<double, 12> kBucketSeconds = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                            0.5,   1.0,  2.5,   5.0,  10.0, 30.0};
  std::array<uint64_t, kBucketSeconds.size()> cumulative_counts{};  // le=kBucketSeconds[i]
  uint64_t count = 0;                                               // also the le="+Inf" bucket
  double sum_seconds = 0;

  void Observe(double seconds);
};

// A snapshot for /metrics. Every Enqueue ends in exactly one of admitted, rejected_queue_full,
// timed_out_in_queue or cancelled_in_queue, or is still queued.
struct SchedulerCounters {
  uint64_t submitted = 0;
  uint64_t admitted = 0;
  uint64_t rejected_queue_full = 0;
  uint64_t timed_out_in_queue = 0;
  uint64_t cancelled_in_queue = 0;
  int in_flight = 0;
  int queued = 0;
  QueueTimeHistogram queue_time;
};

class Scheduler;

// A queued (or already admitted) request's handle. Move-only. Dropping a ticket whose request is
// still queued cancels it, so a handler that returns early cannot leave a ghost in the queue.
// The Scheduler must outlive its tickets.
class Ticket {
 public:
  struct Entry;  // shared with the Scheduler; defined in scheduler.cpp

  Ticket(Ticket&&) noexcept = default;
  Ticket& operator=(Ticket&&) noexcept;
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  ~Ticket();

  // Blocks until the request is admitted (OK), its deadline passes while queued
  // (DeadlineExceeded) or it is cancelled while queued (Cancelled). Once OK, the caller owns an
  // in-flight slot and must call Scheduler::Release(id) when the request finishes.
  absl::Status Wait();
  const RequestId& id() const;

 private:
  friend class Scheduler;
  Ticket(Scheduler* scheduler, std::shared_ptr<Entry> entry);

  Scheduler* scheduler_ = nullptr;
  std::shared_ptr<Entry> entry_;
};

// What Enqueue gives back: a ticket, or a refusal with the body and header to send.
struct EnqueueResult {
  std::optional<Ticket> ticket;  // set when accepted (admitted at once or queued)
  ApiError error;                // when refused: 429 (queue full) or 409 (id already known)
  std::string retry_after;       // Retry-After header value for a 429, whole seconds >= 1

  bool ok() const { return ticket.has_value(); }
};

// Thread-safe. Admission happens inside the scheduler (at Enqueue or Release), never by a waiter
// racing for a slot, which is what keeps FIFO order strict.
class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Pure checks: whether an Enqueue now would run at once / be refused for a full queue. Only a
  // hint under concurrency; Enqueue decides atomically.
  bool can_admit() const;
  bool queue_full() const;

  // Admits at once when a slot is free and nobody waits; otherwise queues until `deadline`
  // (default: now + default_queue_timeout). Refuses with 429 when the queue is full.
  EnqueueResult Enqueue(RequestId id, std::optional<Deadline> deadline = std::nullopt);

  // The client went away. Removes a queued request (its Wait returns Cancelled) and returns true;
  // false when `id` is not queued (an admitted request is ended with Release instead).
  bool Cancel(const RequestId& id);

  // A running request finished: frees its slot and admits the next queued request in FIFO order.
  // False when `id` is not in flight.
  bool Release(const RequestId& id);

  SchedulerCounters counters() const;
  int max_in_flight() const { return options_.max_in_flight; }
  // When a client refused now should retry: recent mean service time times the requests ahead
  // per slot, at least 1 s.
  std::chrono::milliseconds EstimatedRetryAfter() const;

 private:
  friend class Ticket;
  using Queue = std::list<std::shared_ptr<Ticket::Entry>>;

  absl::Status WaitFor(Ticket::Entry& entry);
  void DropTicket(Ticket::Entry& entry);

  // All below with mu_ held.
  void AdmitLocked(Ticket::Entry& entry, SchedulerClock::time_point now);
  void AdmitWaitingLocked(SchedulerClock::time_point now);
  void RemoveQueuedLocked(Ticket::Entry& entry, bool timed_out);
  void PurgeExpiredLocked(SchedulerClock::time_point now);
  std::chrono::milliseconds EstimatedRetryAfterLocked() const;

  const SchedulerOptions options_;
  mutable std::mutex mu_;
  Queue queue_;
  std::unordered_map<RequestId, Queue::iterator> queued_by_id_;
  std::unordered_map<RequestId, SchedulerClock::time_point> running_since_;  // in flight
  std::deque<std::chrono::milliseconds> recent_service_times_;               // newest at the back
  SchedulerCounters counters_;
};

}  // namespace dq::router
