// Continuous batching for the decode phase: one engine thread runs a decode step over up to
// max_batch running sequences at a time; committed requests wait in a FIFO and join as soon as a
// slot frees. A sequence's KV blocks are its lease's, reserved for prompt + max_new_tokens up
// front, so a running sequence never allocates; finished, failed and aborted sequences release
// their lease at once. With a drafter, each step feeds every speculating sequence
// [next_token, draft...] and keeps what engine/spec/verify.h's lossless rule accepts; a rejected
// draft's KV is rolled back by moving the sequence's token count only (its blocks stay the
// lease's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "decode_worker/decode_stream.h"
#include "decode_worker/kv_lease_table.h"
#include "engine/model/model_runner.h"
#include "engine/sampler/sampling_params.h"
#include "engine/spec/drafter.h"
#include "engine/spec/hidden_capture.h"
#include "engine/spec/spec_config.h"

namespace dq::decode {

struct ShippedDrafterKv;  // lease_part_regions.h

// One request to decode: its committed lease and how to sample.
struct DecodeJob {
  std::string request_id;
  std::string lease_id;
  int num_tokens = 0;       // prompt tokens whose KV the prefill worker wrote
  int32_t first_token = 0;  // sampled by the prefill worker
  uint64_t sampler_draws = 0;
  std::optional<dqserve::v1::PositionLogprobs> first_logprobs;
  SamplingParams params;  // validated
  bool logprobs = false;
  int top_logprobs = 0;
  std::vector<int32_t> prompt;  // the drafter's history starts with it
  bool speculate = true;        // false: the request opted out (drafts nothing)
  // The self drafter's prompt KV as the prefill worker computed it (null: it did not).
  std::shared_ptr<ShippedDrafterKv> drafter_kv;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// What a sequence that finished normally (stop or length) leaves in the decode worker's prefix
// cache (KvLeaseTable::set_prefix_cache): nothing; its prompt's full blocks (the KV the prefill
// worker computed: [prefix_cache] assistant_kv = "reprefill"); or also its answer's (the KV
// decode wrote with the decode weights: "reuse"), so a next turn that repeats them reuses it.
enum class KeepKv { kNone, kPrompt, kPromptAndAnswer };

struct DecodeBatcherOptions {
  int max_batch = 4;  // sequences per decode step
  KeepKv keep_kv = KeepKv::kNone;
  std::vector<int32_t> eos_token_ids;  // end a sequence unless its params say ignore_eos
  // Called with a lease's id once it is committed and before its sequence joins the batch,
  // without the batcher's lock (running sequences keep stepping meanwhile): moves the KV the
  // prefill worker wrote into a staging buffer into the lease's blocks (LeasePartRegions::Land).
  // An error fails the request. Empty: the KV is in the blocks already (CPU).
  std::function<absl::Status(const std::string& lease_id)> land_kv;
  // Speculative decoding: a deterministic (point-mass) drafter, or null for plain decoding. Not
  // owned; must outlive the batcher. Only the engine thread calls it. A drafter that reads the
  // target's hidden states (target_layers(), DFlash) gets the kept tokens' rows after every
  // step (Drafter::ObserveTarget); the runner must then expose them (the CPU backend).
  Drafter* drafter = nullptr;
  SpecConfig spec;
  // Engine thread, before a speculating sequence's first draft: gives the drafter the prompt
  // (a self drafter: the prompt KV the prefill worker shipped in `shipped`, or computed here)
  // and says which. Empty: Drafter::Begin. An error: the sequence decodes without drafts.
  std::function<absl::StatusOr<dqserve::v1::DrafterPrompt>(
      uint64_t sequence, std::span<const int32_t> prompt, const ShippedDrafterKv* shipped)>
      begin_draft;
};

// Thread-safe. Lock order: the batcher's lock, then the lease table's.
class DecodeBatcher {
 public:
  // Starts the engine thread. `runner` and `leases` must outlive the batcher; the batcher is the
  // only caller of runner.Forward while it exists.
  DecodeBatcher(ModelRunner& runner, KvLeaseTable& leases, DecodeBatcherOptions options);
  ~DecodeBatcher();
  DecodeBatcher(const DecodeBatcher&) = delete;
  DecodeBatcher& operator=(const DecodeBatcher&) = delete;

  // Commits the job's lease, lands its KV (options.land_kv) and queues the sequence. The
  // returned stream already holds the first token (or is finished when that token ends
  // generation). Errors: the lease table's Commit error (the KV is missing; nothing is
  // recomputed), land_kv's error (the lease is released), AlreadyExists (the request id is
  // decoding), Unavailable (shutting down).
  absl::StatusOr<std::shared_ptr<DecodeStream>> Submit(DecodeJob job);

  // Stops request `request_id`: its stream ends with FINISH_REASON_ABORT and its blocks return
  // to the pool (a waiting sequence now, a running one as soon as the current step ends). A
  // request that is not decoding but holds an uncommitted lease has that lease released.
  // False when the request holds nothing here.
  bool Abort(const std::string& request_id, const std::string& why);

  // Ends every stream (ABORT) and releases every lease; stops the engine thread. Idempotent.
  void Shutdown();

  int running() const;
  int queued() const;
  int64_t steps() const { return steps_.load(); }
  // The most sequences one decode step has held so far (metrics, tests).
  int peak_batch() const { return peak_batch_.load(); }

 private:
  struct Sequence;

  void Loop();
  // Moves waiting sequences into free slots and retires aborted or overdue ones. Holds mu_.
  void AdmitAndSweepLocked();
  // One forward pass over every running sequence, then sampling and stop checks.
  void Step();
  // Builds the decode batch; sequences whose lease is full are finished with an error.
  Batch BuildBatch(std::vector<Sequence*>* in_batch);
  // One token per sequence: ForwardAndSample (on the device where it can).
  absl::Status PlainStep(const Batch& batch, const std::vector<Sequence*>& in);
  // Fills each sequence's input with next_token and its draft; true when any draft is
  // non-empty (otherwise the step runs plain).
  bool Propose(const std::vector<Sequence*>& in);
  // Hands each speculating sequence that has not drafted yet to the drafter (begin_draft).
  void BeginDrafts(const std::vector<Sequence*>& in);
  // Verifies every sequence's input in one forward pass with all logits.
  absl::Status SpecStep(Batch& batch, const std::vector<Sequence*>& in);
  // `first_row`: the sequence's first fed token in the pass (its hidden-state rows).
  void Verify(Sequence& s, const float* rows, int vocab, int64_t first_row);
  // Hands the drafter the target's hidden states of the `kept` tokens fed from `first_row`
  // (positions base ..), when it reads them.
  void ObserveKept(Sequence& s, int base, int kept, int64_t first_row);
  ForwardHooks CaptureHooks() { return capture_ ? capture_->Hooks() : ForwardHooks{}; }
  // Counts one emitted token of a speculating sequence's step (before Emit can end its stream,
  // so the final response carries the totals).
  void CountEmitted(Sequence& s, bool accepted_draft);
  // Appends `token` to the sequence's output or ends it, exactly like Generator::Emit (stop
  // strings aside: the router checks those on text).
  void Emit(Sequence& s, int32_t token, const dqserve::v1::PositionLogprobs* logprobs);
  // Releases the lease (blocks back to the pool), then ends the stream; once per sequence.
  void Finish(Sequence& s, dqserve::v1::FinishReason reason, std::string error = "");
  // Finishes the sequence if it is not yet, and forgets the request. Holds mu_.
  void RetireLocked(Sequence& s);

  ModelRunner& runner_;
  KvLeaseTable& leases_;
  const DecodeBatcherOptions options_;
  const int max_context_;
  // The target layers the drafter reads, captured in every step (null: it reads none).
  std::unique_ptr<HiddenCapture> capture_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;   // changed by the engine thread, under mu_
  std::unordered_map<std::string, Sequence*> live_;  // waiting + running, by request id
  std::atomic<int64_t> steps_{0};
  std::atomic<int> peak_batch_{0};
  uint64_t next_sequence_id_ = 0;  // a drafter's handle of a sequence; guarded by mu_
  std::thread engine_;
};

}  // namespace dq::decode
