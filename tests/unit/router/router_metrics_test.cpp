#include "router/router_metrics.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dq::router
