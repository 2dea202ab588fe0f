#include "router/router_metrics.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "common/process_metrics.h"

namespace dq::router {
namespace {

// TTFT spans a queue wait and a prefill; TPOT is milliseconds per token.
const std::vector<double> kTtftBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                          2.5,  5,     10,   30,  60,   120};
const std::vector<double> kTpotBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05,
                                          0.075, 0.1,    0.15,  0.25, 0.5,  1.0};
// A phase or a whole request: from a short prefill to a long answer.
const std::vector<double> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                             2.5,   5,    10,    30,   60,  120,  300, 600};
// Per token: a prefill's share per prompt token is far below a decode step.
const std::vector<double> kPerTokenBuckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025,
                                              0.0005,  0.001,    0.0025,  0.005,  0.01,
                                              0.025,   0.05,     0.1,     0.25,   1.0};

// Shortest text that reads back as the same double: counters stay exact ("6635520", not
// "6.63552e+06") and bucket bounds stay short ("0.025").
std::string Num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(v);
}

void Header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  absl::StrAppend(&out, "# HELP ", std::string(name), " ", std::string(help), "\n# TYPE ",
                  std::string(name), " ", std::string(type), "\n");
}

void Scalar(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            double value) {
  Header(out, name, type, help);
  absl::StrAppend(&out, std::string(name), " ", Num(value), "\n");
}

// One histogram's sample lines; `labels` ("a=\"x\",b=\"y\"" or "") go before le.
void HistogramSeries(std::string& out, const std::string& n, const std::string& labels,
                     const Histogram::Snapshot& h) {
  const std::string le_prefix = labels.empty() ? "{le=\"" : absl::StrCat("{", labels, ",le=\"");
  const std::string braced = labels.empty() ? "" : absl::StrCat("{", labels, "}");
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    absl::StrAppend(&out, n, "_bucket", le_prefix, Num(h.upper_bounds[i]), "\"} ",
                    h.cumulative_counts[i], "\n");
  }
  absl::StrAppend(&out, n, "_bucket", le_prefix, "+Inf\"} ", h.count, "\n", n, "_sum", braced, " ",
                  Num(h.sum), "\n", n, "_count", braced, " ", h.count, "\n");
}

void HistogramText(std::string& out, std::string_view name, std::string_view help,
                   const Histogram::Snapshot& h) {
  Header(out, name, "histogram", help);
  HistogramSeries(out, std::string(name), "", h);
}

void LabeledHistogramText(std::string& out, std::string_view name, std::string_view help,
                          const LabeledHistograms& h) {
  Header(out, name, "histogram", help);
  for (const LabeledHistograms::Series& s : h.snapshot()) {
    std::string labels;
    for (size_t i = 0; i < s.label_values.size(); ++i) {
      absl::StrAppend(&labels, i ? "," : "", h.label_names()[i], "=\"",
                      EscapeLabelValue(s.label_values[i]), "\"");
    }
    HistogramSeries(out, std::string(name), labels, s.snapshot);
  }
}

Histogram::Snapshot QueueSnapshot(const QueueTimeHistogram& q) {
  Histogram::Snapshot s;
  s.upper_bounds.assign(q.kBucketSeconds.begin(), q.kBucketSeconds.end());
  s.cumulative_counts.assign(q.cumulative_counts.begin(), q.cumulative_counts.end());
  s.count = q.count;
  s.sum = q.sum_seconds;
  return s;
}

// One row per live worker of a value from its last health report.
template <typename T>
void LiveWorkerRows(std::string& out, const char* name, const char* type, T WorkerStatus::*field,
                    std::span<const WorkerStatus> workers) {
  Header(out, name, type, "From the worker's last health report (live workers only).");
  for (const WorkerStatus& w : workers) {
    if (!w.live()) continue;
    absl::StrAppend(&out, name, "{role=\"", std::string(WorkerRoleName(w.role)), "\",address=\"",
                    EscapeLabelValue(w.address), "\"} ", w.*field, "\n");
  }
}

void WorkerGauges(std::string& out, std::span<const WorkerStatus> workers) {
  Header(out, "dq_worker_up", "gauge",
         "1 when the worker is handshaken, layout-compatible and serving.");
  for (const WorkerStatus& w : workers) {
    absl::StrAppend(&out, "dq_worker_up{role=\"", std::string(WorkerRoleName(w.role)),
                    "\",address=\"", EscapeLabelValue(w.address), "\"} ", w.live() ? 1 : 0, "\n");
  }
  Header(out, "dq_worker_info", "gauge",
         "The checkpoint each worker runs (prefill and decode may differ), from its handshake.");
  for (const WorkerStatus& w : workers) {
    if (!w.handshaken) continue;
    const auto& c = w.identity.checkpoint();
    absl::StrAppend(&out, "dq_worker_info{role=\"", std::string(WorkerRoleName(w.role)),
                    "\",address=\"", EscapeLabelValue(w.address), "\",checkpoint=\"",
                    EscapeLabelValue(c.path()), "\",scheme=\"", EscapeLabelValue(c.scheme()),
                    "\",format=\"", EscapeLabelValue(c.format()), "\",sha256=\"",
                    EscapeLabelValue(c.sha256()), "\"} 1\n");
  }
  Header(out, "dq_worker_load", "gauge",
         "Requests running + queued on the worker (its last health report) + the router's own "
         "in-flight calls to it.");
  for (const WorkerStatus& w : workers) {
    absl::StrAppend(&out, "dq_worker_load{role=\"", std::string(WorkerRoleName(w.role)),
                    "\",address=\"", EscapeLabelValue(w.address), "\"} ", w.load(), "\n");
  }
  // KV memory as each live worker last reported it (a dead worker's numbers are stale, so they
  // are left out): lets an operator (and our tests) see blocks return after every request.
  LiveWorkerRows(out, "dq_worker_free_kv_blocks", "gauge", &WorkerStatus::free_kv_blocks, workers);
  LiveWorkerRows(out, "dq_worker_total_kv_blocks", "gauge", &WorkerStatus::total_kv_blocks,
                 workers);
  LiveWorkerRows(out, "dq_worker_open_leases", "gauge", &WorkerStatus::open_leases, workers);
  LiveWorkerRows(out, "dq_worker_free_state_slots", "gauge", &WorkerStatus::free_state_slots,
                 workers);
  LiveWorkerRows(out, "dq_worker_total_state_slots", "gauge", &WorkerStatus::total_state_slots,
                 workers);
  // The prefix cache: blocks cached now, and lookups, hits and evictions since the worker started.
  LiveWorkerRows(out, "dq_worker_prefix_cached_blocks", "gauge",
                 &WorkerStatus::prefix_cached_blocks, workers);
  LiveWorkerRows(out, "dq_worker_prefix_queried_blocks_total", "counter",
                 &WorkerStatus::prefix_queried_blocks, workers);
  LiveWorkerRows(out, "dq_worker_prefix_hit_blocks_total", "counter",
                 &WorkerStatus::prefix_hit_blocks, workers);
  LiveWorkerRows(out, "dq_worker_prefix_evicted_blocks_total", "counter",
                 &WorkerStatus::prefix_evicted_blocks, workers);
}

}  // namespace

std::string_view OutcomeName(Outcome o) {
  static constexpr std::array<std::string_view, kNumOutcomes> kNames = {
      "stop", "length", "abort", "error", "rejected", "cancelled", "timeout", "bad_request"};
  return kNames[static_cast<size_t>(o)];
}

Histogram::Histogram(std::vector<double> upper_bounds) {
  std::sort(upper_bounds.begin(), upper_bounds.end());
  s_.cumulative_counts.assign(upper_bounds.size(), 0);
  s_.upper_bounds = std::move(upper_bounds);
}

void Histogram::Observe(double value) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < s_.upper_bounds.size(); ++i) {
    if (value <= s_.upper_bounds[i]) ++s_.cumulative_counts[i];
  }
  ++s_.count;
  s_.sum += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  return s_;
}

LabeledHistograms::LabeledHistograms(std::vector<std::string> label_names,
                                     std::vector<double> upper_bounds)
    : names_(std::move(label_names)), bounds_(std::move(upper_bounds)) {}

void LabeledHistograms::Observe(const std::vector<std::string>& label_values, double value) {
  std::unique_lock lock(mu_);
  auto it = series_.find(label_values);
  if (it == series_.end()) {
    const bool full = series_.size() >= kMaxSeries;
    const std::vector<std::string> key =
        full ? std::vector<std::string>(names_.size(), "other") : label_values;
    it = series_.try_emplace(key, std::make_unique<Histogram>(bounds_)).first;
  }
  Histogram* h = it->second.get();  // never erased: safe to use without the lock
  lock.unlock();
  h->Observe(value);
}

std::vector<LabeledHistograms::Series> LabeledHistograms::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<Series> out;
  for (const auto& [values, h] : series_) out.push_back(Series{values, h->snapshot()});
  return out;
}

RouterMetrics::RouterMetrics()
    : time_to_first_token(kTtftBuckets),
      time_per_output_token(kTpotBuckets),
      phase_seconds({"phase", "scheme"}, kLatencyBuckets),
      phase_seconds_per_token({"phase", "scheme"}, kPerTokenBuckets),
      e2e_request_latency(kLatencyBuckets) {}

void RouterMetrics::ObservePhase(std::string_view phase, std::string_view scheme, double seconds,
                                 size_t tokens) {
  const std::vector<std::string> labels = {std::string(phase),
                                           scheme.empty() ? "unknown" : std::string(scheme)};
  phase_seconds.Observe(labels, seconds);
  if (tokens > 0) phase_seconds_per_token.Observe(labels, seconds / static_cast<double>(tokens));
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderMetrics(const RouterMetrics& m, const SchedulerCounters& scheduler,
                          std::span<const WorkerStatus> workers) {
  std::string out;
  HistogramText(out, "dq_time_to_first_token_seconds",
                "Time from admission to the first generated token.",
                m.time_to_first_token.snapshot());
  HistogramText(out, "dq_time_per_output_token_seconds",
                "Mean time per generated token after the first, per request.",
                m.time_per_output_token.snapshot());
  HistogramText(out, "dq_queue_time_seconds", "Time admitted requests waited in the queue.",
                QueueSnapshot(scheduler.queue_time));
  LabeledHistogramText(out, "dq_request_phase_seconds",
                       "Time of a request's phase by the serving worker's scheme: prefill (the "
                       "Prefill call: forward pass and KV transfer), decode (first to last token).",
                       m.phase_seconds);
  LabeledHistogramText(out, "dq_request_phase_seconds_per_token",
                       "A phase's time per token: prefill per prompt token, decode per generated "
                       "token after the first.",
                       m.phase_seconds_per_token);
  HistogramText(out, "dq_e2e_request_latency_seconds",
                "Time from a request's arrival at the pipeline (before queueing) to its end, for "
                "requests that reached their first token.",
                m.e2e_request_latency.snapshot());
  Header(out, "dq_requests_total", "counter", "Requests by how they ended.");
  for (size_t i = 0; i < kNumOutcomes; ++i) {
    absl::StrAppend(&out, "dq_requests_total{outcome=\"",
                    std::string(OutcomeName(static_cast<Outcome>(i))), "\"} ", m.requests[i].load(),
                    "\n");
  }
  Scalar(out, "dq_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
         static_cast<double>(m.prompt_tokens.load()));
  Scalar(out, "dq_prompt_cached_tokens_total", "counter",
         "Prompt tokens whose KV a prefill worker took from its prefix cache.",
         static_cast<double>(m.prompt_cached_tokens.load()));
  Scalar(out, "dq_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(m.generation_tokens.load()));
  Scalar(out, "dq_kv_transfer_bytes_total", "counter",
         "KV bytes written from prefill into decode workers.",
         static_cast<double>(m.kv_transfer_bytes.load()));
  Scalar(out, "dq_state_transfer_bytes_total", "counter",
         "Recurrent state bytes (hybrid models' state slots) written from prefill into decode "
         "workers.",
         static_cast<double>(m.state_transfer_bytes.load()));
  Scalar(out, "dq_kv_transfer_seconds_total", "counter",
         "Time spent transferring KV (first write posted to last acknowledged).",
         static_cast<double>(m.kv_transfer_micros.load()) / 1e6);
  Scalar(out, "dq_kv_transfer_failures_total", "counter", "Prefills that failed moving KV.",
         static_cast<double>(m.kv_transfer_failures.load()));
  Scalar(out, "dq_spec_drafted_tokens_total", "counter",
         "Draft tokens the decode workers verified (speculative decoding).",
         static_cast<double>(m.spec_drafted_tokens.load()));
  Scalar(out, "dq_spec_accepted_tokens_total", "counter",
         "Draft tokens the target model kept (<= drafted).",
         static_cast<double>(m.spec_accepted_tokens.load()));
  Scalar(out, "dq_spec_steps_total", "counter",
         "Decode steps that ran with a drafter (one target forward each, per request).",
         static_cast<double>(m.spec_steps.load()));
  Scalar(out, "dq_spec_drafter_prompts_shipped_total", "counter",
         "Requests whose self drafter's prompt KV the prefill worker computed and shipped.",
         static_cast<double>(m.spec_drafter_prompts_shipped.load()));
  Scalar(out, "dq_spec_drafter_prompts_recomputed_total", "counter",
         "Requests whose self drafter's prompt KV the decode worker computed itself (the "
         "prefill worker had no matching drafter).",
         static_cast<double>(m.spec_drafter_prompts_recomputed.load()));
  Scalar(out, "dq_requests_running", "gauge", "Requests admitted and not finished.",
         scheduler.in_flight);
  Scalar(out, "dq_requests_queued", "gauge", "Requests waiting for admission.", scheduler.queued);
  WorkerGauges(out, workers);
  if (absl::StatusOr<ProcessMetrics> p = ReadProcessMetrics(); p.ok()) {
    out += ProcessMetricsText(*p);
  }
  return out;
}

}  // namespace dq::router
