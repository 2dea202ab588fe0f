// The prefill worker's batching engine: one thread owns the model runner and its KV pool. Each
// iteration runs one Phase::kPrefill forward pass over the waiting prompts that fit a token
// budget (FIFO). A prompt longer than the budget is prefilled in chunks of up to the budget over
// several iterations (chunked prefill); a prompt that fits runs as one chunk, so its result is
// bit-for-bit the one-shot prefill the colocated Generator does. Each layer's fresh KV blocks
// are shipped to the decode lease from the per-layer hook (KvStager: posted at once, or copied
// off the device first), so transfer overlaps compute; every transfer of an iteration ends
// before the next iteration touches those blocks. With a device cache an iteration also writes
// at most the staging arena's blocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/model/model_runner.h"
#include "prefill_worker/drafter_prefill.h"
#include "prefill_worker/prefill_job.h"

namespace dq::prefill {

class KvStager;

struct PrefillBatcherOptions {
  int token_budget = 2048;  // most prompt tokens in one forward pass
  // The drafter (drafter_prefill.h), or null: after each iteration's target pass (which runs
  // with the drafter's target hooks), the jobs with a drafter writer run the same chunks through
  // the drafter, its KV shipped by the drafter's stager as the target's is by the batcher's.
  // Must outlive the batcher.
  DrafterPrefill* drafter = nullptr;
  // Prefix caching: a finished prompt's full KV blocks stay in the pool under the hash chain of
  // their tokens (kv_block_pool.h), and a later prompt with the same leading blocks computes
  // only the rest; the whole prompt's KV is still shipped to the decode lease. Not for jobs that
  // need every position's logits (prompt logprobs) or ship drafter KV, nor with a staging arena
  // (device KV through host staging), whose size the shipped cached blocks could exceed.
  bool prefix_cache = false;
};

struct PrefillLoad {
  int free_kv_blocks = 0;
  int total_kv_blocks = 0;
  int running = 0;  // started, not finished
  int queued = 0;   // waiting for their first chunk
  PrefixCacheStats prefix;
  int free_state_slots = 0;  // a hybrid model's state slots (0 / 0: none)
  int total_state_slots = 0;
};

class PrefillBatcher {
 public:
  // Starts the engine thread. `runner` and `stager` (which ships each layer's KV, kv_stager.h)
  // must outlive the batcher, and nobody else may use them.
  PrefillBatcher(ModelRunner& runner, KvStager& stager, const PrefillBatcherOptions& options);
  // Stop().
  ~PrefillBatcher();
  PrefillBatcher(const PrefillBatcher&) = delete;
  PrefillBatcher& operator=(const PrefillBatcher&) = delete;

  // Queues a validated job (its prompt fits the context and the pool; its writer is prepared).
  // The job's cv is notified when it finished; after Stop() it fails at once (Unavailable).
  void Submit(std::shared_ptr<PrefillJob> job);
  // Finishes the iteration in progress, fails every other job (Unavailable) and joins.
  void Stop();

  PrefillLoad load() const;
  int token_budget() const { return options_.token_budget; }

 private:
  // One item of an iteration: a job and the prompt tokens [start, start + count) it runs.
  struct Step {
    PrefillJob* job;
    int start;
    int count;
  };

  void Loop();
  // Fails the jobs whose caller cancelled or whose deadline passed.
  void DropCancelled();
  // Picks this iteration's chunks (allocating local blocks for jobs that start now).
  std::vector<Step> FormBatch();
  // Gives a starting job its blocks: the cached prefix (at most all but the last prompt token,
  // whose logits must be computed) and fresh ones for the rest. False when the pool is full.
  bool StartJob(PrefillJob& job);
  void RunBatch(const std::vector<Step>& steps);
  // Whether the step runs its job's prompt to the end.
  static bool IsLastChunk(const Step& step);
  // After the step's pass: a hybrid job's last chunk posts the state layers the hook did not
  // (when the pass succeeded) and waits for the state transfers; OK for any other step.
  absl::Status ShipState(PrefillJob& job, const Step& step, bool forward_ok);
  // The drafter's pass over the steps whose job ships drafter KV; its error drops the drafter
  // part of those jobs (they still complete: the decode worker then computes it).
  void RunDrafter(const std::vector<Step>& steps);
  // Gives up the job's drafter part, keeping `why` for its commit.
  void DropDrafter(PrefillJob& job, const std::string& why);
  // Samples the first token (and logprobs) for a job whose last chunk just ran.
  void Complete(PrefillJob& job, const Batch& batch, const BatchLogits& logits, size_t item);
  void CollectPromptLogprobs(PrefillJob& job, const Step& step, const BatchLogits& logits,
                             size_t item) const;
  // Frees the job's local blocks, publishes the outcome and forgets the job.
  void Finish(PrefillJob* job, absl::Status status);
  void PublishLoad();

  ModelRunner& runner_;
  KvStager& stager_;
  const PrefillBatcherOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PrefillJob>> incoming_;  // under mu_
  bool stopping_ = false;                             // under mu_

  std::deque<std::shared_ptr<PrefillJob>> jobs_;  // engine thread only, FIFO

  std::atomic<int> free_blocks_{0};
  std::atomic<int> free_slots_{0};
  mutable std::mutex stats_mu_;
  PrefixCacheStats prefix_stats_;  // under stats_mu_
  std::atomic<int> running_{0};
  std::atomic<int> queued_{0};
  std::thread thread_;
};

}  // namespace dq::prefill
