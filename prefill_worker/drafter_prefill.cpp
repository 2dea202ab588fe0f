#include "prefill_worker/drafter_prefill.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker_common/device_backend.h"
#include "worker_common/worker_identity.h"

namespace dq::prefill {
namespace v1 = dqserve::v1;

absl::StatusOr<std::unique_ptr<DrafterPrefill>> DrafterPrefill::Create(
    const worker::PhaseModel& pm, const DrafterPrefillOptions& o) {
  std::unique_ptr<DrafterPrefill> d(new DrafterPrefill());
  DQ_ASSIGN_OR_RETURN(d->weights_, worker::LoadDrafterWeights(pm, o.weights, o.threads));
  if (d->weights_->config.vocab_size != pm.runner->config().vocab_size) {
    return absl::InvalidArgumentError(
        "the drafter's vocabulary differs from the model's; give a drafter that shares its "
        "tokenizer");
  }
  // No CUDA graphs: a replayed step calls no per-layer hook (as for the target, main.cpp).
  worker::DeviceBackendOptions bo;
  bo.max_batch_tokens = o.max_batch_tokens;
  bo.graphs = false;
  DQ_ASSIGN_OR_RETURN(BackendFactory backend, worker::BackendForDevice(pm.device, bo));
  ModelRunnerOptions ro;
  ro.threads = o.threads;
  ro.kv_block_size = pm.runner->kv_pool().block_size();
  ro.kv_capacity = o.kv_capacity_tokens;
  ro.backend = std::move(backend);
  DQ_ASSIGN_OR_RETURN(d->runner_,
                      ModelRunner::Create(*d->weights_->checkpoint, d->weights_->config, ro));
  DQ_ASSIGN_OR_RETURN(d->staging_, worker::CreateKvStaging(*d->runner_, pm.device));
  DQ_ASSIGN_OR_RETURN(d->senders_, KvSenders::Create(o.senders));
  DQ_ASSIGN_OR_RETURN(d->stager_,
                      KvStager::Create(*d->staging_, o.arena_blocks, d->senders_->any_host()));
  DQ_RETURN_IF_ERROR(d->senders_->Register(d->stager_->host_source(), d->stager_->device_source()));
  d->fingerprint_ = worker::DrafterFingerprint(*d->weights_);
  d->layout_ = worker::DrafterKvLayout(*d->runner_, *d->staging_);
  return d;
}

DrafterPrefill::~DrafterPrefill() = default;

std::string DrafterPrefill::Mismatch(const v1::DrafterKvLease& lease) const {
  std::vector<std::string> why;
  const std::string layout = worker::KvLayoutMismatch(lease.kv_layout(), layout_);
  if (!layout.empty()) why.push_back(absl::StrCat("the drafter's KV layout differs: ", layout));
  if (lease.fingerprint() != fingerprint_) {
    why.push_back(absl::StrCat("the decode worker drafts with weights ", lease.fingerprint(),
                               ", this prefill worker's drafter is ", fingerprint_,
                               "; give both workers the same --draft-format/--draft-group-size "
                               "(or --draft-weights) and --model"));
  }
  if (senders_->Find(lease.endpoint().transport()) == nullptr) {
    why.push_back(absl::StrCat("the drafter's regions want KV transport '",
                               lease.endpoint().transport(), "', this worker has ",
                               absl::StrJoin(senders_->kinds(), ", ")));
  }
  return absl::StrJoin(why, "; ");
}

absl::StatusOr<std::unique_ptr<LeaseWriter>> DrafterPrefill::Writer(const v1::KvLease& lease,
                                                                    int num_tokens,
                                                                    int io_timeout_ms) {
  // The drafter's part as a lease of its own: its blocks, its regions.
  v1::KvLease part;
  part.set_lease_id(absl::StrCat(lease.lease_id(), " (drafter)"));
  part.set_request_id(lease.request_id());
  *part.mutable_blocks() = lease.drafter().blocks();
  *part.mutable_endpoint() = lease.drafter().endpoint();
  *part.mutable_kv_layout() = lease.drafter().kv_layout();
  KvSender* sender = senders_->Find(part.endpoint().transport());
  if (sender == nullptr) return absl::FailedPreconditionError(Mismatch(lease.drafter()));
  DQ_ASSIGN_OR_RETURN(LeasePlan plan, LeasePlan::Create(part, num_tokens, sender->geometry));
  return LeaseWriter::Create(*sender, std::move(plan), part, io_timeout_ms);
}

}  // namespace dq::prefill
