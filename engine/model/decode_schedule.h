// The schedule of a persistent decode step (issue 19), planned on the host from the model
// program: one decode step of `rows` new tokens (one per sequence in a decode step; a sequence's
// drafted tokens plus one in a speculative verification pass) as tasks over output tiles, in one
// global order,
// each task waiting on one counter that the tasks of the stage before it bump. Workers (SMs of
// the persistent CUDA kernel; threads of the CPU executor, decode_schedule_executor.h) take the
// tasks round-robin in that order and run each once its counter reaches its target, so a step is
// one launch with no host round trip between layers, and a worker may start streaming a task's
// weights before its inputs are ready (they do not depend on the counter).
//
// Stages per attention block: kQkv (RMSNorm folded into each task) -> kRopeKv (QK-norm, RoPE,
// the token's K/V written) -> kAttention -> kO (x += ...); per MLP block: kGateUp (RMSNorm and
// SwiGLU folded in) -> kDown (x += ...); then kLmHead (the final RMSNorm folded in). Every stage
// waits for the whole stage before it: each reads a buffer that the stage before writes in full
// (x through RMSNorm, q|k|v, attention outputs, the SwiGLU product), and that chain also orders
// every reuse of a buffer across blocks (a stage's writes cannot race a reader two stages back).
// Counters start at 0 each step; counter c counts finished tasks of stage c.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"
#include "engine/model/model_program.h"

namespace dq {

enum class DecodeTaskKind : uint8_t {
  kQkv,        // rows [begin, end) of q|k|v (q_dim + 2 kv_dim rows) = W · RMSNorm(x; norm)
  kRopeKv,     // items [begin, end) of (row, kv head): QK-norm and RoPE of its q heads and k,
               // its K and V written to the row's cache slot
  kAttention,  // items [begin, end) of (row, kv head): paged attention of its q heads over the
               // row's context (a verification row sees the rows of its sequence before it);
               // with rope_in_attention, the item's kRopeKv work first
  kO,          // rows [begin, end) of x += W_o · attention output
  kGateUp,     // rows [begin, end) of silu(W_gate n) * (W_up n), n = RMSNorm(x; norm)
  kDown,       // rows [begin, end) of x += W_down · that product
  kLmHead,     // rows [begin, end) of logits = W_lm · RMSNorm(x; final_norm)
};
const char* DecodeTaskKindName(DecodeTaskKind k);

struct DecodeTask {
  DecodeTaskKind kind = DecodeTaskKind::kQkv;
  int layer = 0;  // program layer (kLmHead: the number of layers)
  int block = 0;  // block index within the layer
  int64_t begin = 0, end = 0;
  int wait_counter = -1;  // -1: ready at once (the first stage)
  int wait_target = 0;    // tasks of stage wait_counter that must have finished
  int signal_counter = 0;
};

struct DecodeScheduleOptions {
  int workers = 1;           // persistent CTAs (SMs) or CPU threads; >= 1
  int tasks_per_worker = 1;  // GEMV stages: about this many tiles per worker (>= 1)
  int row_multiple = 16;     // GEMV tiles are multiples of this many rows (the int tile's 16)
  int rows = 1;              // new tokens in the step, over all its sequences (1..64)
  // No kRopeKv stage: each kAttention task first does its item's QK-norm, RoPE and K/V write.
  // Only for steps of one new token per sequence (a verification row's attention also reads the
  // K/V that its sequence's earlier rows write, items of other tasks). Saves a stage per layer.
  bool rope_in_attention = false;
};

struct DecodeSchedule {
  DecodeScheduleOptions options;
  std::vector<DecodeTask> tasks;         // the global order: each task's stage precedes it
  std::vector<std::vector<int>> queues;  // per worker: task indices, in the global order
  std::vector<int> stage_tasks;          // per counter: how many tasks signal it
  int num_counters() const { return static_cast<int>(stage_tasks.size()); }
};

// Plans a decode step of `program` (attention and MLP blocks; finalized) with `config`'s shapes.
// InvalidArgument for options out of range.
absl::StatusOr<DecodeSchedule> PlanDecodeStep(const ModelProgram& program,
                                              const ModelConfig& config,
                                              const DecodeScheduleOptions& options);

// OK when `s` covers what a step computes exactly once (every output row of every stage, every
// (row, kv head) item), each task waits on the stage right before it for all of that stage's
// tasks, and each worker's queue follows the global order (so waiting workers cannot deadlock:
// the earliest unfinished task never waits on a later one). Else Internal naming the first
// broken rule. Tests and the CUDA backend's plan check call it.
absl::Status CheckDecodeSchedule(const DecodeSchedule& s, const ModelProgram& program,
                                 const ModelConfig& config);

}  // namespace dq
