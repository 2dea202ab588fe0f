// The drafter on the prefill worker (docs/speculative.md, "Disaggregation"): the same drafter
// the decode worker drafts with, with its own KV pool, stager and transports, so that the
// prompt's drafter KV is computed here and written into the lease's drafter part
// (KvLease.parts, STATE_PART_ROLE_DRAFTER) beside the target's, with the same lifecycle. The decode
// worker then needs no drafter prefill of its own. Two kinds:
//   self:   the model on cheaper weights, its own runner; its prompt KV is its prefill pass over
//           the same chunks;
//   dflash: a DFlash drafter (CPU); its prompt "KV" is the context K/V of its layers, projected
//           from the target's hidden states that the target's pass captured (AddTargetHooks).
// A lease whose drafter part this worker cannot fill (another layout or weight fingerprint) is
// still prefilled; its commit says why the drafter KV is missing and the decode worker
// computes it.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/model/model_runner.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/hidden_capture.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/kv_stager.h"
#include "prefill_worker/lease_writer.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/phase_model.h"

namespace dq::prefill {

struct DrafterPrefillOptions {
  std::string kind = "self";  // "self" or "dflash" (weights.weights: its directory)
  worker::DrafterWeightsOptions weights;
  int threads = 0;
  int kv_capacity_tokens = 0;  // the drafter's local pool (the target's, so both always fit)
  int arena_blocks = 0;        // a device cache's staging arena (the target's, kv_stager.h)
  int max_batch_tokens = 0;    // device backends: most tokens in one forward pass
  KvSendersOptions senders;    // the target's transports, once more for the drafter's memory
};

// One job's chunk of a prefill iteration whose drafter KV this worker ships.
struct DrafterChunk {
  KvSequence* kv = nullptr;         // the job's blocks in DrafterPrefill::kv_pool()
  std::span<const int32_t> tokens;  // prompt[start, start + count)
  int start = 0;
  int64_t target_row = 0;  // the chunk's first token in the iteration's target pass
};

class DrafterPrefill {
 public:
  // Loads the drafter (self: its weights from `pm`'s base model, as the decode worker does;
  // dflash: the checkpoint over `pm`'s target) on `pm`'s device with `pm`'s KV block size.
  // Errors: the weights' (bad format, another tokenizer, a DFlash drafter made for another
  // target), dflash on a GPU, a transport that cannot start.
  static absl::StatusOr<std::unique_ptr<DrafterPrefill>> Create(const worker::PhaseModel& pm,
                                                                const DrafterPrefillOptions& o);
  ~DrafterPrefill();

  // Empty when this drafter can fill a lease's drafter `part`; else why not, with both values
  // (layout fields, weight fingerprints, transport) and what to change.
  std::string Mismatch(const dqserve::v1::StatePart& part) const;
  // A writer for lease `lease_id`'s drafter `part` (Mismatch is empty): prepares its regions.
  absl::StatusOr<std::unique_ptr<LeaseWriter>> Writer(const std::string& lease_id,
                                                      const dqserve::v1::StatePart& part,
                                                      int num_tokens, int io_timeout_ms);

  // The pool the jobs' drafter blocks come from.
  KvBlockPool& kv_pool();
  // What the target's pass must run with for this drafter (dflash: the capture of the target
  // layers it reads; self: nothing).
  void AddTargetHooks(ForwardHooks* hooks);
  // The drafter's KV of `chunks`, right after the target's pass over the same iteration; each
  // layer goes to stager().LayerWritten once it is in the pool. Between stager().Begin / End.
  absl::Status Forward(std::span<const DrafterChunk> chunks);

  KvStager& stager() { return *stager_; }
  const std::string& kind() const { return kind_; }
  const std::string& fingerprint() const { return fingerprint_; }
  const dqserve::v1::KvLayout& layout() const { return layout_; }

 private:
  DrafterPrefill() = default;
  absl::Status LoadSelf(const worker::PhaseModel& pm, const DrafterPrefillOptions& o);
  absl::Status LoadDFlash(const worker::PhaseModel& pm, const DrafterPrefillOptions& o);

  std::string kind_;
  // Declared in dependency order: destroyed senders first, weights last.
  std::unique_ptr<Model> weights_;                 // self
  std::unique_ptr<ModelRunner> runner_;            // self
  std::unique_ptr<Checkpoint> dflash_checkpoint_;  // dflash
  std::unique_ptr<DFlashDrafter> dflash_;          // dflash
  std::unique_ptr<HiddenCapture> capture_;         // dflash: the target pass's layers
  std::unique_ptr<worker::KvStaging> staging_;
  std::unique_ptr<KvStager> stager_;
  std::unique_ptr<KvSenders> senders_;
  std::string fingerprint_;
  dqserve::v1::KvLayout layout_;
};

}  // namespace dq::prefill
