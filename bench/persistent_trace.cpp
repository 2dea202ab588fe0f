#include "bench/persistent_trace.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace dq::bench {
namespace {

struct KindSum {
  int stages = 0, tasks = 0;
  double span = 0;     // sum over its stages: this stage's last end - the stage before's
  double run = 0;      // sum over tasks: end - ready
  double run_max = 0;  // sum over stages: the longest task's end - ready
  double notice = 0;   // sum over tasks: ready - the stage before's last end
  double late = 0;     // sum over stages: the last task's start - the stage before's last end
  double lead = 0;     // sum over tasks: ready - start (priming its weights, then waiting)
};

using Task = cuda::CudaDecoderModel::PersistentTaskTime;

}  // namespace

nlohmann::json SummarizePersistentTrace(const std::vector<Task>& tasks) {
  std::map<int, std::vector<const Task*>> stages;
  uint64_t first = UINT64_MAX, last = 0;
  for (const Task& t : tasks) {
    stages[t.stage].push_back(&t);
    first = std::min(first, t.start);
    last = std::max(last, t.end);
  }
  std::map<std::string, KindSum> kinds;
  double before = static_cast<double>(first);
  for (const auto& [stage, ts] : stages) {
    KindSum& k = kinds[DecodeTaskKindName(ts.front()->kind)];
    double end = 0, start = 0, run_max = 0;
    for (const Task* t : ts) {
      end = std::max(end, static_cast<double>(t->end));
      start = std::max(start, static_cast<double>(t->start));
      const double run = static_cast<double>(t->end) - static_cast<double>(t->ready);
      run_max = std::max(run_max, run);
      k.run += run;
      k.notice += static_cast<double>(t->ready) - before;
      k.lead += static_cast<double>(t->ready) - static_cast<double>(t->start);
      ++k.tasks;
    }
    ++k.stages;
    k.span += end - before;
    k.run_max += run_max;
    k.late += std::max(0.0, start - before);
    before = end;
  }
  const double step_us = (static_cast<double>(last) - static_cast<double>(first)) / 1e3;
  nlohmann::json out = {{"step_us", step_us}, {"tasks", tasks.size()}};
  std::fprintf(stderr,
               "  persistent trace: step %.1f us, %zu tasks\n"
               "  %-10s %6s %6s %10s %6s %9s %9s %9s %9s\n",
               step_us, tasks.size(), "kind", "stages", "tasks", "span us", "share", "span/st",
               "run max", "notice", "late");
  for (const auto& [name, k] : kinds) {
    const double s = k.stages, n = k.tasks;
    nlohmann::json j = {{"stages", k.stages},
                        {"tasks_per_stage", n / s},
                        {"span_us_total", k.span / 1e3},
                        {"share_of_step", k.span / 1e3 / step_us},
                        {"span_us_per_stage", k.span / s / 1e3},
                        {"run_us_mean", k.run / n / 1e3},
                        {"run_us_max_per_stage", k.run_max / s / 1e3},
                        {"notice_us_mean", k.notice / n / 1e3},
                        {"late_start_us_per_stage", k.late / s / 1e3},
                        {"ready_minus_start_us_mean", k.lead / n / 1e3}};
    std::fprintf(stderr, "  %-10s %6d %6.0f %10.1f %5.0f%% %9.2f %9.2f %9.2f %9.2f\n", name.c_str(),
                 k.stages, n / s, k.span / 1e3, 100 * k.span / 1e3 / step_us, k.span / s / 1e3,
                 k.run_max / s / 1e3, k.notice / n / 1e3, k.late / s / 1e3);
    out["by_kind"][name] = j;
  }
  return out;
}

}  // namespace dq::bench
