#include "router/router_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>

namespace dq::router {
namespace {

TEST(HistogramTest, CountsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1.0, 0.5});  // unsorted on purpose
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(7);
  const Histogram::Snapshot s = h.snapshot();
  ASSERT_EQ(s.upper_bounds, (std::vector<double>{0.1, 0.5, 1.0}));
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{1, 2, 2}));
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.sum, 7.55);
}

TEST(EscapeLabelValueTest, EscapesBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("/ckpt/qwen3-4b"), "/ckpt/qwen3-4b");
}

class RenderMetricsTest : public ::testing::Test {
 protected:
  std::string Render() {
    WorkerStatus p;
    p.role = WorkerRole::kPrefill;
    p.address = "10.0.0.1:7001";
    p.handshaken = p.layout_ok = p.serving = true;
    p.identity.mutable_checkpoint()->set_path("/ckpt/qwen3 \"fp8\"");
    p.identity.mutable_checkpoint()->set_scheme("fp8:w8a8");
    p.identity.mutable_checkpoint()->set_format("dq");
    WorkerStatus d;
    d.role = WorkerRole::kDecode;
    d.address = "10.0.0.2:7002";  // never handshaken: up 0 and no info line
    d.running = 2;
    d.router_in_flight = 1;
    metrics_.Count(Outcome::kStop);
    metrics_.Count(Outcome::kStop);
    metrics_.Count(Outcome::kRejected);
    metrics_.kv_transfer_micros = 2500000;
    metrics_.kv_transfer_bytes = 6635520;  // exact, not 6.63552e+06
    metrics_.spec_drafted_tokens = 40;
    metrics_.spec_accepted_tokens = 25;
    metrics_.spec_steps = 12;
    metrics_.time_to_first_token.Observe(0.2);
    SchedulerCounters sc;
    sc.in_flight = 3;
    sc.queued = 4;
    sc.queue_time.Observe(0.02);
    std::vector<WorkerStatus> workers = {p, d};
    return RenderMetrics(metrics_, sc, workers);
  }
  RouterMetrics metrics_;
};

TEST_F(RenderMetricsTest, EverySampleLineIsWellFormedAndEveryFamilyHasHelpAndType) {
  metrics_.ObservePhase("prefill", "nvfp4:w4a4", 0.2, 100);  // labelled series too
  metrics_.ObservePhase("decode", "int2-g64:weight_only", 1.0, 50);
  metrics_.e2e_request_latency.Observe(1.3);
  const std::string text = Render();
  const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\.)*")*\})? [-+0-9.eE]+(Inf)?$)");
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  std::string last_type;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      last_type = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    // Every sample belongs to the family declared last (histograms add suffixes).
    EXPECT_EQ(line.rfind(last_type, 0), 0u) << line << " after TYPE " << last_type;
    ++samples;
  }
  EXPECT_GT(samples, 40);
  EXPECT_EQ(text.back(), '\n');
}

TEST_F(RenderMetricsTest, ReportsCountersGaugesHistogramsAndWorkerIdentities) {
  const std::string text = Render();
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  EXPECT_TRUE(has("dq_requests_total{outcome=\"stop\"} 2\n"));
  EXPECT_TRUE(has("dq_requests_total{outcome=\"rejected\"} 1\n"));
  EXPECT_TRUE(has("dq_requests_total{outcome=\"bad_request\"} 0\n"));
  EXPECT_TRUE(has("dq_kv_transfer_seconds_total 2.5\n"));
  EXPECT_TRUE(has("dq_kv_transfer_bytes_total 6635520\n"));
  EXPECT_TRUE(has("dq_spec_drafted_tokens_total 40\n"));
  EXPECT_TRUE(has("dq_spec_accepted_tokens_total 25\n"));
  EXPECT_TRUE(has("dq_spec_steps_total 12\n"));
  EXPECT_TRUE(has("dq_requests_running 3\n"));
  EXPECT_TRUE(has("dq_requests_queued 4\n"));
  EXPECT_TRUE(has("# TYPE dq_time_to_first_token_seconds histogram\n"));
  EXPECT_TRUE(has("dq_time_to_first_token_seconds_bucket{le=\"0.1\"} 0\n"));
  EXPECT_TRUE(has("dq_time_to_first_token_seconds_bucket{le=\"0.25\"} 1\n"));
  EXPECT_TRUE(has("dq_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_TRUE(has("dq_queue_time_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_TRUE(has("dq_queue_time_seconds_count 1\n"));
  EXPECT_TRUE(has("dq_worker_up{role=\"prefill\",address=\"10.0.0.1:7001\"} 1\n"));
  EXPECT_TRUE(has("dq_worker_up{role=\"decode\",address=\"10.0.0.2:7002\"} 0\n"));
  EXPECT_TRUE(
      has("dq_worker_info{role=\"prefill\",address=\"10.0.0.1:7001\",checkpoint=\"/ckpt/"
          "qwen3 \\\"fp8\\\"\",scheme=\"fp8:w8a8\",format=\"dq\""));
  EXPECT_FALSE(has("dq_worker_info{role=\"decode\""));
  EXPECT_TRUE(has("dq_worker_load{role=\"decode\",address=\"10.0.0.2:7002\"} 3\n"));
}

TEST(LabeledHistogramsTest, OneSeriesPerLabelSetAndACapOnNewOnes) {
  LabeledHistograms h({"phase", "scheme"}, {0.1, 1.0});
  h.Observe({"decode", "int4"}, 0.05);
  h.Observe({"decode", "int4"}, 0.5);
  h.Observe({"prefill", "nvfp4:w4a4"}, 2);
  std::vector<LabeledHistograms::Series> s = h.snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].label_values, (std::vector<std::string>{"decode", "int4"}));
  EXPECT_EQ(s[0].snapshot.cumulative_counts, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s[0].snapshot.count, 2u);
  EXPECT_EQ(s[1].snapshot.cumulative_counts, (std::vector<uint64_t>{0, 0}));
  EXPECT_DOUBLE_EQ(s[1].snapshot.sum, 2.0);
  for (size_t i = 0; i < 2 * LabeledHistograms::kMaxSeries; ++i) {
    h.Observe({"decode", "s" + std::to_string(i)}, 0.01);
  }
  s = h.snapshot();
  ASSERT_EQ(s.size(), LabeledHistograms::kMaxSeries + 1);  // the cap, then one "other" series
  const auto other = std::find_if(s.begin(), s.end(), [](const auto& x) {
    return x.label_values == std::vector<std::string>{"other", "other"};
  });
  ASSERT_NE(other, s.end());
  EXPECT_EQ(other->snapshot.count, LabeledHistograms::kMaxSeries + 2);
}

TEST(RouterMetricsTest, ObservePhaseRecordsTimeAndTimePerToken) {
  RouterMetrics m;
  m.ObservePhase("prefill", "fp8:w8a8", 0.5, 1000);
  m.ObservePhase("decode", "", 2.0, 100);  // no scheme reported: "unknown"
  m.ObservePhase("decode", "", 1.0, 0);    // no tokens: the time only
  const auto t = m.phase_seconds.snapshot();
  const auto per = m.phase_seconds_per_token.snapshot();
  ASSERT_EQ(t.size(), 2u);
  ASSERT_EQ(per.size(), 2u);
  EXPECT_EQ(t[0].label_values, (std::vector<std::string>{"decode", "unknown"}));
  EXPECT_EQ(t[0].snapshot.count, 2u);
  EXPECT_DOUBLE_EQ(t[0].snapshot.sum, 3.0);
  EXPECT_EQ(per[0].snapshot.count, 1u);
  EXPECT_DOUBLE_EQ(per[0].snapshot.sum, 0.02);
  EXPECT_EQ(per[1].label_values, (std::vector<std::string>{"prefill", "fp8:w8a8"}));
  EXPECT_DOUBLE_EQ(per[1].snapshot.sum, 0.0005);
}

TEST_F(RenderMetricsTest, PhaseHistogramsCarryTheirLabelsAndProcessMetricsArePresent) {
  metrics_.ObservePhase("decode", "int4-g64:weight_only", 0.04, 2);  // 0.02 per token
  metrics_.ObservePhase("prefill", "a\"b", 0.75, 3);
  metrics_.e2e_request_latency.Observe(1.5);
  const std::string text = Render();
  auto has = [&](const std::string& s) { return text.find(s) != std::string::npos; };
  EXPECT_TRUE(has("# TYPE dq_request_phase_seconds histogram\n"));
  EXPECT_TRUE(
      has("dq_request_phase_seconds_bucket{phase=\"decode\",scheme=\"int4-g64:weight_only\","
          "le=\"0.025\"} 0\n"));
  EXPECT_TRUE(
      has("dq_request_phase_seconds_bucket{phase=\"decode\",scheme=\"int4-g64:weight_only\","
          "le=\"0.05\"} 1\n"));
  EXPECT_TRUE(
      has("dq_request_phase_seconds_count{phase=\"decode\",scheme=\"int4-g64:weight_only\"} "
          "1\n"));
  EXPECT_TRUE(has("dq_request_phase_seconds_sum{phase=\"prefill\",scheme=\"a\\\"b\"} 0.75\n"));
  EXPECT_TRUE(
      has("dq_request_phase_seconds_per_token_bucket{phase=\"decode\",scheme=\"int4-g64:"
          "weight_only\",le=\"0.025\"} 1\n"));
  EXPECT_TRUE(
      has("dq_request_phase_seconds_per_token_sum{phase=\"prefill\",scheme=\"a\\\"b\"} "
          "0.25\n"));
  EXPECT_TRUE(has("dq_e2e_request_latency_seconds_bucket{le=\"1\"} 0\n"));
  EXPECT_TRUE(has("dq_e2e_request_latency_seconds_bucket{le=\"2.5\"} 1\n"));
  EXPECT_TRUE(has("dq_e2e_request_latency_seconds_count 1\n"));
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_open_fds", "process_start_time_seconds"}) {
    EXPECT_TRUE(has(std::string("\n") + name + " ")) << name;
  }
}

}  // namespace
}  // namespace dq::router
