#include "bench/kernel_profile.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace dq::bench {
namespace {

// CUPTI hands records to static callbacks, so the collected state is file-local; the class
// contract (one profiler at a time) keeps it single-owner.
struct Records {
  std::mutex mu;
  std::map<std::string, KernelTime> kernels;
  uint64_t first = UINT64_MAX, last = 0;
  double memcpy_ns = 0;
  int64_t memcpy_bytes = 0;
};
Records* g_records = nullptr;

std::string ShortName(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  // "void dq::cuda::wo::GemvKernel<...>(...)" -> "GemvKernel<...>": keep template arguments
  // (they say which variant ran), drop the return type, namespaces and parameter list.
  const size_t paren = s.rfind('(');
  if (paren != std::string::npos) s.resize(paren);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  const size_t tmpl = s.find('<');
  const size_t ns = s.rfind("::", tmpl == std::string::npos ? std::string::npos : tmpl);
  if (ns != std::string::npos) s.erase(0, ns + 2);
  if (s.size() > 110) s = s.substr(0, 107) + "...";
  return s;
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard lock(g_records->mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      KernelTime& t = g_records->kernels[ShortName(k->name)];
      if (t.name.empty()) t.name = ShortName(k->name);
      ++t.launches;
      t.total_us += (k->end - k->start) / 1e3;
      g_records->first = std::min<uint64_t>(g_records->first, k->start);
      g_records->last = std::max<uint64_t>(g_records->last, k->end);
    } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      g_records->memcpy_ns += static_cast<double>(m->end - m->start);
      g_records->memcpy_bytes += static_cast<int64_t>(m->bytes);
    }
  }
  std::free(buffer);
}

bool Ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel profile: %s failed: %s\n", what, msg ? msg : "?");
  return false;
}

}  // namespace

bool KernelProfiler::Start() {
  if (g_records == nullptr) {
    g_records = new Records();
    if (!Ok(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted), "register")) {
      return false;
    }
  }
  {
    std::lock_guard lock(g_records->mu);
    g_records->kernels.clear();
    g_records->first = UINT64_MAX;
    g_records->last = 0;
    g_records->memcpy_ns = 0;
    g_records->memcpy_bytes = 0;
  }
  return Ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels") &&
         Ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
}

ProfileSummary KernelProfiler::Stop(int per) {
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityFlushAll(1);
  ProfileSummary s;
  std::lock_guard lock(g_records->mu);
  const double d = per > 0 ? per : 1;
  for (auto& [name, t] : g_records->kernels) {
    KernelTime k = t;
    k.total_us /= d;
    k.launches = (k.launches + per / 2) / std::max(per, 1);
    s.kernel_us += k.total_us;
    s.kernels.push_back(k);
  }
  std::sort(s.kernels.begin(), s.kernels.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.total_us > b.total_us; });
  if (g_records->last > g_records->first)
    s.span_us = (g_records->last - g_records->first) / 1e3 / d;
  s.memcpy_us = g_records->memcpy_ns / 1e3 / d;
  s.memcpy_bytes = static_cast<int64_t>(g_records->memcpy_bytes / d);
  return s;
}

nlohmann::json ToJson(const ProfileSummary& s, int top) {
  nlohmann::json k = nlohmann::json::array();
  for (size_t i = 0; i < s.kernels.size() && static_cast<int>(i) < top; ++i) {
    k.push_back({{"kernel", s.kernels[i].name},
                 {"launches", s.kernels[i].launches},
                 {"us", s.kernels[i].total_us}});
  }
  return {{"kernel_us", s.kernel_us},
          {"span_us", s.span_us},
          {"memcpy_us", s.memcpy_us},
          {"memcpy_bytes", s.memcpy_bytes},
          {"kernels", k}};
}

void Print(const ProfileSummary& s, int top) {
  std::fprintf(stderr, "    kernels %.1f us, first-to-last span %.1f us, memcpy %.1f us (%lld B)\n",
               s.kernel_us, s.span_us, s.memcpy_us, static_cast<long long>(s.memcpy_bytes));
  for (size_t i = 0; i < s.kernels.size() && static_cast<int>(i) < top; ++i) {
    const KernelTime& k = s.kernels[i];
    std::fprintf(stderr, "    %8.1f us %5lld x  %s\n", k.total_us,
                 static_cast<long long>(k.launches), k.name.c_str());
  }
}

}  // namespace dq::bench
