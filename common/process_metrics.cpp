#include "common/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dq {
namespace {

absl::StatusOr<std::string> ReadFile(const char* path) {
  std::ifstream f(path);
  if (!f) return absl::UnavailableError(absl::StrCat("cannot read ", path));
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The whitespace-separated words of `s`.
std::vector<std::string_view> Words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\n') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

bool ToU64(std::string_view s, uint64_t* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

void Sample(std::string& out, const char* name, const char* type, const char* help, double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  std::string(buf, ec == std::errc() ? end - buf : 0), "\n");
}

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(std::string_view stat, long ticks_per_second,
                                       long page_bytes, double boot_time_seconds) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields start
  // after the last ')'. Field 3 (state) is index 0 of the rest.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) {
    return absl::InvalidArgumentError("/proc/self/stat: no ')' after the command name");
  }
  const std::vector<std::string_view> f = Words(stat.substr(close + 1));
  constexpr size_t kUtime = 11, kStime = 12, kStart = 19, kVsize = 20, kRss = 21;  // fields 14..
  uint64_t utime = 0, stime = 0, start = 0, vsize = 0, rss = 0;
  if (f.size() <= kRss || !ToU64(f[kUtime], &utime) || !ToU64(f[kStime], &stime) ||
      !ToU64(f[kStart], &start) || !ToU64(f[kVsize], &vsize) || !ToU64(f[kRss], &rss)) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc/self/stat: expected at least 24 numeric fields, got ", f.size() + 2));
  }
  const double tps = static_cast<double>(ticks_per_second);
  return ProcStat{static_cast<double>(utime + stime) / tps, vsize,
                  rss * static_cast<uint64_t>(page_bytes),
                  boot_time_seconds + static_cast<double>(start) / tps};
}

absl::StatusOr<double> ParseBootTime(std::string_view proc_stat) {
  size_t at = 0;
  while (at < proc_stat.size()) {
    size_t end = proc_stat.find('\n', at);
    if (end == std::string_view::npos) end = proc_stat.size();
    const std::vector<std::string_view> w = Words(proc_stat.substr(at, end - at));
    uint64_t v = 0;
    if (w.size() == 2 && w[0] == "btime" && ToU64(w[1], &v)) return static_cast<double>(v);
    at = end + 1;
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

absl::StatusOr<ProcessMetrics> ReadProcessMetrics() {
  absl::StatusOr<std::string> stat = ReadFile("/proc/self/stat");
  absl::StatusOr<std::string> system = ReadFile("/proc/stat");
  if (!stat.ok()) return stat.status();
  if (!system.ok()) return system.status();
  absl::StatusOr<double> boot = ParseBootTime(*system);
  if (!boot.ok()) return boot.status();
  absl::StatusOr<ProcStat> s =
      ParseProcStat(*stat, sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE), *boot);
  if (!s.ok()) return s.status();
  ProcessMetrics m;
  m.cpu_seconds = s->cpu_seconds;
  m.resident_bytes = s->resident_bytes;
  m.virtual_bytes = s->virtual_bytes;
  m.start_time_seconds = s->start_time_seconds;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++m.open_fds;
  }
  if (m.open_fds > 0) --m.open_fds;  // the directory iterator's own descriptor
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    m.max_fds = lim.rlim_cur;
  }
  return m;
}

std::string ProcessMetricsText(const ProcessMetrics& m) {
  std::string out;
  Sample(out, "process_cpu_seconds_total", "counter", "CPU time (user + system) this process used.",
         m.cpu_seconds);
  Sample(out, "process_resident_memory_bytes", "gauge", "Memory this process holds in RAM (RSS).",
         static_cast<double>(m.resident_bytes));
  Sample(out, "process_virtual_memory_bytes", "gauge", "Address space this process has mapped.",
         static_cast<double>(m.virtual_bytes));
  Sample(out, "process_open_fds", "gauge", "File descriptors this process has open.",
         static_cast<double>(m.open_fds));
  if (m.max_fds) {
    Sample(out, "process_max_fds", "gauge",
           "Its limit on open file descriptors (soft RLIMIT_NOFILE).",
           static_cast<double>(*m.max_fds));
  }
  Sample(out, "process_start_time_seconds", "gauge",
         "When this process started, in seconds since the Unix epoch.", m.start_time_seconds);
  return out;
}

}  // namespace dq
