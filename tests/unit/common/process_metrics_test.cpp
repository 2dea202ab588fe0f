// Prometheus process metrics from /proc: the stat parser on hand-written lines (a command name
// with spaces and parentheses, a truncated line), and this process's own numbers against what
// the test does to it (CPU burnt, descriptors opened, memory touched) and getrusage.
#include "common/process_metrics.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace dq {
namespace {

// A /proc/<pid>/stat line with utime 250, stime 50, starttime 1000, vsize 4096000, rss 300.
std::string StatLine(const std::string& comm) {
  return "4242 (" + comm +
         ") S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 1000 4096000 300 "
         "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
}

TEST(ProcessMetricsTest, ParsesStatFieldsAfterTheCommandName) {
  for (const std::string comm : {"dq-router", "a b) c (d", ")"}) {
    absl::StatusOr<ProcStat> s = ParseProcStat(StatLine(comm), 100, 4096, 1.7e9);
    ASSERT_TRUE(s.ok()) << comm << ": " << s.status();
    EXPECT_DOUBLE_EQ(s->cpu_seconds, 3.0) << comm;  // (250 + 50) / 100
    EXPECT_EQ(s->virtual_bytes, 4096000u) << comm;
    EXPECT_EQ(s->resident_bytes, 300u * 4096) << comm;
    EXPECT_DOUBLE_EQ(s->start_time_seconds, 1.7e9 + 10.0) << comm;  // boot + 1000 / 100
  }
}

TEST(ProcessMetricsTest, RefusesMalformedStat) {
  EXPECT_FALSE(ParseProcStat("4242 dq-router S 1", 100, 4096, 0).ok());  // no ')'
  EXPECT_FALSE(ParseProcStat("4242 (x) S 1 2 3", 100, 4096, 0).ok());    // too few fields
  std::string bad = StatLine("x");
  bad.replace(bad.find(" 250 "), 5, " 2x0 ");
  EXPECT_FALSE(ParseProcStat(bad, 100, 4096, 0).ok());
  EXPECT_FALSE(ParseProcStat(StatLine("x"), 0, 4096, 0).ok());  // no tick rate
}

TEST(ProcessMetricsTest, BootTimeLine) {
  EXPECT_EQ(*ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1764700000\nprocesses 9\n"), 1764700000.0);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\nbtimex 5\n").ok());
}

TEST(ProcessMetricsTest, ThisProcessAgainstWhatTheTestDoes) {
  absl::StatusOr<ProcessMetrics> before = ReadProcessMetrics();
  ASSERT_TRUE(before.ok()) << before.status();
  // Burn ~0.3 s of CPU, open 10 descriptors, touch 64 MiB.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < until) x = x + 1;
  std::vector<int> fds;
  for (int i = 0; i < 5; ++i) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    fds.insert(fds.end(), {p[0], p[1]});
  }
  std::vector<char> block(64 << 20);
  std::memset(block.data(), 1, block.size());
  absl::StatusOr<ProcessMetrics> after = ReadProcessMetrics();
  ASSERT_TRUE(after.ok()) << after.status();
  for (int fd : fds) close(fd);

  EXPECT_GE(after->cpu_seconds - before->cpu_seconds, 0.2);  // clock ticks are 10 ms
  rusage ru{};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
  const double rusage_cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
                            ru.ru_stime.tv_usec * 1e-6;
  EXPECT_NEAR(after->cpu_seconds, rusage_cpu, 0.05);
  EXPECT_EQ(after->open_fds, before->open_fds + 10);
  EXPECT_GE(after->resident_bytes, before->resident_bytes + (60u << 20));
  EXPECT_LE(after->resident_bytes, static_cast<uint64_t>(ru.ru_maxrss) * 1024 + (1u << 20));
  EXPECT_GE(after->virtual_bytes, after->resident_bytes);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(after->start_time_seconds, now + 1);
  EXPECT_GE(after->start_time_seconds, now - 3600);  // the test binary started just now
  EXPECT_EQ(after->start_time_seconds, before->start_time_seconds);
  rlimit lim{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur != RLIM_INFINITY) EXPECT_EQ(after->max_fds, lim.rlim_cur);
}

TEST(ProcessMetricsTest, TextHasPrometheusNamesTypesAndValues) {
  ProcessMetrics m;
  m.cpu_seconds = 1.25;
  m.resident_bytes = 123456789;
  m.virtual_bytes = 987654321;
  m.open_fds = 17;
  m.max_fds = 1024;
  m.start_time_seconds = 1764700000.5;
  const std::string t = ProcessMetricsText(m);
  auto has = [&](const std::string& s) { return t.find(s) != std::string::npos; };
  EXPECT_TRUE(has("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.25\n"));
  EXPECT_TRUE(
      has("# TYPE process_resident_memory_bytes gauge\n"
          "process_resident_memory_bytes 123456789\n"));
  EXPECT_TRUE(has("process_virtual_memory_bytes 987654321\n"));
  EXPECT_TRUE(has("# TYPE process_open_fds gauge\nprocess_open_fds 17\n"));
  EXPECT_TRUE(has("process_max_fds 1024\n"));
  EXPECT_TRUE(
      has("# TYPE process_start_time_seconds gauge\n"
          "process_start_time_seconds 1764700000.5\n"));
  m.max_fds.reset();
  EXPECT_EQ(ProcessMetricsText(m).find("process_max_fds"), std::string::npos);
}

}  // namespace
}  // namespace dq
