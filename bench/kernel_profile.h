// Per-kernel device time of a region of work, through CUPTI's activity API (kernels inside CUDA
// graphs included): which kernels a decode step spends its time in, and how much of the step is
// gaps between kernels. For the benchmark only; the engine never links CUPTI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dq::bench {

struct KernelTime {
  std::string name;      // demangled, template arguments cut
  int64_t launches = 0;  // per `per` (Stop's argument)
  double total_us = 0;
};

struct ProfileSummary {
  std::vector<KernelTime> kernels;  // by total time, largest first
  double kernel_us = 0;             // sum of kernel durations
  double span_us = 0;               // first kernel start to last kernel end
  double memcpy_us = 0;
  int64_t memcpy_bytes = 0;
};

// Records every kernel and memcpy between Start() and Stop(). One at a time per process.
class KernelProfiler {
 public:
  // Fails (returns false, prints why) when CUPTI cannot be initialised.
  bool Start();
  // Flushes and summarises; `per` divides every figure (e.g. per decode step).
  ProfileSummary Stop(int per);
};

nlohmann::json ToJson(const ProfileSummary& s, int top);
void Print(const ProfileSummary& s, int top);

}  // namespace dq::bench
