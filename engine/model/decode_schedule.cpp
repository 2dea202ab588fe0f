#include "engine/model/decode_schedule.h"

#include <algorithm>
#include <variant>

#include "absl/strings/str_cat.h"

namespace dq {
namespace {

// One stage of the step: what it computes and over how many rows (GEMV) or items.
struct Stage {
  DecodeTaskKind kind;
  int layer, block;
  int64_t extent;
  bool gemv;  // split into row tiles; else one task per (token, kv head) item
};

std::vector<Stage> Stages(const ModelProgram& program, const ModelConfig& c,
                          const DecodeScheduleOptions& o) {
  std::vector<Stage> out;
  const int64_t items = int64_t{o.rows} * c.num_kv_heads;
  for (int l = 0; l < static_cast<int>(program.layers.size()); ++l) {
    const auto& blocks = program.layers[l].blocks;
    for (int b = 0; b < static_cast<int>(blocks.size()); ++b) {
      if (std::holds_alternative<AttentionBlock>(blocks[b])) {
        out.push_back({DecodeTaskKind::kQkv, l, b, c.q_dim() + 2 * c.kv_dim(), true});
        if (!o.rope_in_attention) out.push_back({DecodeTaskKind::kRopeKv, l, b, items, false});
        out.push_back({DecodeTaskKind::kAttention, l, b, items, false});
        out.push_back({DecodeTaskKind::kO, l, b, c.hidden_size, true});
      } else {
        out.push_back({DecodeTaskKind::kGateUp, l, b, c.intermediate_size, true});
        out.push_back({DecodeTaskKind::kDown, l, b, c.hidden_size, true});
      }
    }
  }
  out.push_back(
      {DecodeTaskKind::kLmHead, static_cast<int>(program.layers.size()), 0, c.vocab_size, true});
  return out;
}

// Row tiles of about extent / target rows, each a multiple of `multiple` (the last may be short).
std::vector<std::pair<int64_t, int64_t>> Tiles(int64_t extent, int64_t target, int64_t multiple) {
  int64_t rows = (extent + target - 1) / target;
  rows = (rows + multiple - 1) / multiple * multiple;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t b = 0; b < extent; b += rows) out.emplace_back(b, std::min(extent, b + rows));
  return out;
}

}  // namespace

const char* DecodeTaskKindName(DecodeTaskKind k) {
  switch (k) {
    case DecodeTaskKind::kQkv:
      return "qkv";
    case DecodeTaskKind::kRopeKv:
      return "rope_kv";
    case DecodeTaskKind::kAttention:
      return "attention";
    case DecodeTaskKind::kO:
      return "o";
    case DecodeTaskKind::kGateUp:
      return "gate_up";
    case DecodeTaskKind::kDown:
      return "down";
    case DecodeTaskKind::kLmHead:
      return "lm_head";
  }
  return "?";
}

absl::StatusOr<DecodeSchedule> PlanDecodeStep(const ModelProgram& program,
                                              const ModelConfig& config,
                                              const DecodeScheduleOptions& o) {
  if (o.workers < 1 || o.tasks_per_worker < 1 || o.row_multiple < 1 || o.rows < 1 || o.rows > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode schedule: workers ", o.workers, ", tasks_per_worker ",
                     o.tasks_per_worker, ", row_multiple ", o.row_multiple, ", rows ", o.rows,
                     "; give workers, tasks_per_worker and row_multiple >= 1 and 1 to 64 rows"));
  }
  DQ_RETURN_IF_ERROR(program.RequireLlamaBlocks("persistent decode"));
  DecodeSchedule s;
  s.options = o;
  s.queues.resize(o.workers);
  const int64_t target = int64_t{o.workers} * o.tasks_per_worker;
  for (const Stage& st : Stages(program, config, o)) {
    const int counter = s.num_counters();
    std::vector<std::pair<int64_t, int64_t>> ranges;
    if (st.gemv) {
      ranges = Tiles(st.extent, target, o.row_multiple);
    } else {
      for (int64_t i = 0; i < st.extent; ++i) ranges.emplace_back(i, i + 1);
    }
    for (const auto& [b, e] : ranges) {
      DecodeTask t{st.kind,
                   st.layer,
                   st.block,
                   b,
                   e,
                   counter - 1,
                   counter > 0 ? s.stage_tasks[counter - 1] : 0,
                   counter};
      s.queues[s.tasks.size() % o.workers].push_back(static_cast<int>(s.tasks.size()));
      s.tasks.push_back(t);
    }
    s.stage_tasks.push_back(static_cast<int>(ranges.size()));
  }
  return s;
}

absl::Status CheckDecodeSchedule(const DecodeSchedule& s, const ModelProgram& program,
                                 const ModelConfig& config) {
  const std::vector<Stage> stages = Stages(program, config, s.options);
  if (s.num_counters() != static_cast<int>(stages.size())) {
    return absl::InternalError(absl::StrCat("decode schedule: ", s.num_counters(),
                                            " stages for a program of ", stages.size()));
  }
  size_t at = 0;  // the stages' tasks are contiguous, in stage order
  for (int c = 0; c < s.num_counters(); ++c) {
    const Stage& st = stages[c];
    int64_t next_row = 0;
    for (int i = 0; i < s.stage_tasks[c]; ++i, ++at) {
      if (at >= s.tasks.size()) return absl::InternalError("decode schedule: tasks end early");
      const DecodeTask& t = s.tasks[at];
      const std::string where = absl::StrCat("decode schedule: task ", at, " (",
                                             DecodeTaskKindName(t.kind), ", layer ", t.layer, ")");
      if (t.kind != st.kind || t.layer != st.layer || t.block != st.block ||
          t.signal_counter != c) {
        return absl::InternalError(absl::StrCat(where, " is not stage ", c, "'s"));
      }
      if (t.begin != next_row || t.end <= t.begin || t.end > st.extent) {
        return absl::InternalError(absl::StrCat(where, " covers [", t.begin, ", ", t.end,
                                                "), expected to start at ", next_row));
      }
      next_row = t.end;
      const int want_target = c > 0 ? s.stage_tasks[c - 1] : 0;
      if (t.wait_counter != c - 1 || t.wait_target != want_target) {
        return absl::InternalError(absl::StrCat(where, " waits on counter ", t.wait_counter,
                                                " for ", t.wait_target, ", expected ", c - 1,
                                                " for ", want_target));
      }
    }
    if (next_row != st.extent) {
      return absl::InternalError(absl::StrCat("decode schedule: stage ", c, " (",
                                              DecodeTaskKindName(st.kind), ") covers ", next_row,
                                              " of ", st.extent));
    }
  }
  if (at != s.tasks.size()) return absl::InternalError("decode schedule: tasks past the stages");
  std::vector<int> seen(s.tasks.size(), 0);
  for (const std::vector<int>& q : s.queues) {
    for (size_t i = 0; i < q.size(); ++i) {
      if (q[i] < 0 || q[i] >= static_cast<int>(s.tasks.size()) || ++seen[q[i]] > 1 ||
          (i > 0 && q[i] <= q[i - 1])) {
        return absl::InternalError(absl::StrCat(
            "decode schedule: a worker queue holds task ", q[i],
            " out of the global order or twice; queues must follow the order (deadlock-free)"));
      }
    }
  }
  if (std::count(seen.begin(), seen.end(), 0) > 0) {
    return absl::InternalError("decode schedule: a task is in no worker's queue");
  }
  return absl::OkStatus();
}

}  // namespace dq
