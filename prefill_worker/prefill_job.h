// One prefill request as the batching engine sees it: what to compute, where its KV goes, its
// progress (engine thread only), and the result the gRPC handler waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dqserve/v1/generate.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/sampler/sampling_params.h"
#include "prefill_worker/lease_writer.h"
#include "prefill_worker/state_slot_writer.h"

namespace dq::prefill {

struct PrefillResult {
  int32_t first_token = -1;
  std::optional<dqserve::v1::PositionLogprobs> first_token_logprobs;
  uint64_t sampler_draws = 0;
  std::vector<dqserve::v1::PositionLogprobs> prompt_logprobs;
  double compute_ms = 0;
  double transfer_ms = 0;
  // Time the engine waited for this request's transfers after its forward passes ended: the
  // part of the transfer not hidden behind compute.
  double transfer_wait_ms = 0;
  uint64_t transfer_bytes = 0;
  uint64_t state_transfer_bytes = 0;  // recurrent state written into the lease's state slot
  int cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache (not computed)
  // The self drafter's prompt KV went into the lease's drafter part too / why it did not.
  bool drafter_kv = false;
  std::string drafter_skipped;
};

struct PrefillJob {
  using Clock = std::chrono::steady_clock;

  // Input, fixed once queued.
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  bool logprobs = false;  // first token's logprobs
  int top_logprobs = 0;
  bool prompt_logprobs = false;
  std::optional<Clock::time_point> deadline;
  std::unique_ptr<LeaseWriter> writer;
  // A hybrid model's recurrent state: written into the lease's state slot part once the
  // prompt's last chunk has run (required: its failure fails the request).
  std::unique_ptr<StateSlotWriter> state_writer;
  // The self drafter's part (drafter_prefill.h): a writer when this worker ships the drafter's
  // prompt KV too (reset, with the reason in drafter_skipped, once it cannot).
  std::unique_ptr<LeaseWriter> drafter_writer;
  std::string drafter_skipped;

  // Set by the handler when the caller goes away; the engine stops at the next chunk boundary.
  std::atomic<bool> cancelled{false};

  // Progress, engine thread only.
  KvSequence kv;          // local blocks; allocated when the first chunk runs
  KvSequence drafter_kv;  // the drafter's local blocks, alongside
  bool started = false;
  int done_tokens = 0;
  int cached_tokens = 0;  // the leading done_tokens taken from the prefix cache
  double compute_ms = 0;
  double transfer_wait_ms = 0;

  // Outcome, under mu.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  absl::Status status;
  PrefillResult result;
};

}  // namespace dq::prefill
