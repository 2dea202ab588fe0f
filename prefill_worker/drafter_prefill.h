// The self drafter on the prefill worker (docs/speculative.md, "Disaggregation"): the same
// drafter weights the decode worker drafts with, its own runner, KV pool, stager and transports,
// so that the prompt's drafter KV is computed here and written into the lease's drafter part
// (KvLease.drafter) beside the target's, with the same lifecycle. The decode worker then needs
// no drafter prefill of its own. A lease whose drafter part this worker cannot fill (another
// layout or weight fingerprint) is still prefilled; its commit says why the drafter KV is
// missing and the decode worker computes it.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/model/model_runner.h"
#include "prefill_worker/kv_senders.h"
#include "prefill_worker/kv_stager.h"
#include "prefill_worker/lease_writer.h"
#include "worker_common/drafter_weights.h"
#include "worker_common/phase_model.h"

namespace dq::prefill {

struct DrafterPrefillOptions {
  worker::DrafterWeightsOptions weights;
  int threads = 0;
  int kv_capacity_tokens = 0;  // the drafter's local pool (the target's, so both always fit)
  int arena_blocks = 0;        // a device cache's staging arena (the target's, kv_stager.h)
  int max_batch_tokens = 0;    // device backends: most tokens in one forward pass
  KvSendersOptions senders;    // the target's transports, once more for the drafter's memory
};

class DrafterPrefill {
 public:
  // Loads the drafter's weights (from `pm`'s base model, as the decode worker does) and builds
  // its runner on `pm`'s device with `pm`'s KV block size. Errors: the weights' (bad format,
  // another tokenizer), a transport that cannot start.
  static absl::StatusOr<std::unique_ptr<DrafterPrefill>> Create(const worker::PhaseModel& pm,
                                                                const DrafterPrefillOptions& o);
  ~DrafterPrefill();

  // Empty when this drafter can fill `lease`'s drafter part; else why not, with both values
  // (layout fields, weight fingerprints, transport) and what to change.
  std::string Mismatch(const dqserve::v1::DrafterKvLease& lease) const;
  // A writer for `lease`'s drafter part (Mismatch is empty): prepares its regions.
  absl::StatusOr<std::unique_ptr<LeaseWriter>> Writer(const dqserve::v1::KvLease& lease,
                                                      int num_tokens, int io_timeout_ms);

  ModelRunner& runner() { return *runner_; }
  KvStager& stager() { return *stager_; }
  const std::string& fingerprint() const { return fingerprint_; }
  const dqserve::v1::KvLayout& layout() const { return layout_; }
  const std::string& path() const { return weights_->path; }

 private:
  DrafterPrefill() = default;

  // Declared in dependency order: destroyed senders first, weights last.
  std::unique_ptr<Model> weights_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<worker::KvStaging> staging_;
  std::unique_ptr<KvStager> stager_;
  std::unique_ptr<KvSenders> senders_;
  std::string fingerprint_;
  dqserve::v1::KvLayout layout_;
};

}  // namespace dq::prefill
