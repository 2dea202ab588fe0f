// The standard Prometheus process metrics, as the official clients name them
// (process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds), read from Linux's /proc.
// The parsers take the files' text so they can be tested on any input; ReadProcessMetrics reads
// this process's own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace dq {

struct ProcessMetrics {
  double cpu_seconds = 0;       // user + system time
  uint64_t resident_bytes = 0;  // RSS
  uint64_t virtual_bytes = 0;   // VSZ
  uint64_t open_fds = 0;
  std::optional<uint64_t> max_fds;  // the soft RLIMIT_NOFILE; nullopt when unlimited
  double start_time_seconds = 0;    // Unix time the process started
};

// The fields of /proc/<pid>/stat that ProcessMetrics needs. `ticks_per_second`: sysconf
// (_SC_CLK_TCK); `page_bytes`: sysconf(_SC_PAGESIZE); `boot_time_seconds`: /proc/stat's btime.
struct ProcStat {
  double cpu_seconds = 0;
  uint64_t virtual_bytes = 0;
  uint64_t resident_bytes = 0;
  double start_time_seconds = 0;
};
absl::StatusOr<ProcStat> ParseProcStat(std::string_view stat, long ticks_per_second,
                                       long page_bytes, double boot_time_seconds);
// /proc/stat's "btime" line (seconds since the epoch when the machine booted).
absl::StatusOr<double> ParseBootTime(std::string_view proc_stat);

absl::StatusOr<ProcessMetrics> ReadProcessMetrics();

// The metrics in Prometheus's text format (HELP, TYPE and one sample each).
std::string ProcessMetricsText(const ProcessMetrics& m);

}  // namespace dq
