// The router's Prometheus metrics and their text exposition (format 0.0.4): latency histograms,
// request outcomes, token and KV-transfer counters, scheduler gauges, and one info gauge per
// worker naming its checkpoint (prefill and decode may run different weights; this is where an
// operator sees which).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "router/scheduler.h"
#include "router/worker_registry.h"

namespace dq::router {

// How a request ended, as counted in dq_requests_total{outcome}.
enum class Outcome {
  kStop,        // finished: EOS, stop token or stop string
  kLength,      // finished: max_tokens or context
  kAbort,       // aborted by an Abort call
  kError,       // a worker or the router failed it
  kRejected,    // refused for load (429)
  kCancelled,   // the client went away
  kTimeout,     // its deadline passed
  kBadRequest,  // refused as invalid (400, 401, 404, 413)
};
inline constexpr size_t kNumOutcomes = 8;
std::string_view OutcomeName(Outcome o);

// A cumulative histogram with fixed buckets. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound
    uint64_t count = 0;                       // the +Inf bucket
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  Snapshot s_;
};

// One histogram per label set of a family (made on first use). The label values here come from
// the workers' identities (phase x scheme), so there are few; past kMaxSeries sets, new ones are
// counted under the values "other" so a misbehaving worker cannot grow the page without bound.
class LabeledHistograms {
 public:
  static constexpr size_t kMaxSeries = 64;
  LabeledHistograms(std::vector<std::string> label_names, std::vector<double> upper_bounds);
  void Observe(const std::vector<std::string>& label_values, double value);

  struct Series {
    std::vector<std::string> label_values;
    Histogram::Snapshot snapshot;
  };
  std::vector<Series> snapshot() const;  // ordered by label values
  const std::vector<std::string>& label_names() const { return names_; }

 private:
  const std::vector<std::string> names_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Histogram>> series_;
};

struct RouterMetrics {
  RouterMetrics();

  Histogram time_to_first_token;    // seconds, admission -> first decoded token
  Histogram time_per_output_token;  // seconds, mean over a request's tokens after the first
  // By {phase, scheme}: phase "prefill" is the Prefill call (the prefill worker's forward pass
  // and KV transfer, per prompt token), "decode" the first token to the last (per generated
  // token after the first); scheme is the worker's checkpoint scheme ("int4-g64:weight_only").
  LabeledHistograms phase_seconds;
  LabeledHistograms phase_seconds_per_token;
  Histogram e2e_request_latency;  // seconds, the pipeline's Start (before queueing) -> the end
  std::array<std::atomic<uint64_t>, kNumOutcomes> requests{};
  std::atomic<uint64_t> prompt_tokens{0};
  std::atomic<uint64_t> prompt_cached_tokens{0};  // of which a prefill worker's prefix cache had
  std::atomic<uint64_t> generation_tokens{0};
  std::atomic<uint64_t> kv_transfer_bytes{0};
  std::atomic<uint64_t> state_transfer_bytes{0};  // hybrid models' recurrent state slots
  std::atomic<uint64_t> kv_transfer_micros{0};
  std::atomic<uint64_t> kv_transfer_failures{0};
  // Speculative decoding, summed over finished requests: acceptance rate = accepted / drafted,
  // acceptance length = (accepted + steps) / steps.
  std::atomic<uint64_t> spec_drafted_tokens{0};
  std::atomic<uint64_t> spec_accepted_tokens{0};
  std::atomic<uint64_t> spec_steps{0};
  // Requests whose self drafter got its prompt KV from the prefill worker / computed it on the
  // decode worker (no matching drafter on the prefill side).
  std::atomic<uint64_t> spec_drafter_prompts_shipped{0};
  std::atomic<uint64_t> spec_drafter_prompts_recomputed{0};

  void Count(Outcome o) { requests[static_cast<size_t>(o)].fetch_add(1); }
  // One phase of a request that took `seconds` over `tokens` tokens (> 0).
  void ObservePhase(std::string_view phase, std::string_view scheme, double seconds, size_t tokens);
  uint64_t count(Outcome o) const { return requests[static_cast<size_t>(o)].load(); }
};

// Escapes a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view v);

// The whole /metrics page, this process's process_* metrics included.
std::string RenderMetrics(const RouterMetrics& m, const SchedulerCounters& scheduler,
                          std::span<const WorkerStatus> workers);

}  // namespace dq::router
