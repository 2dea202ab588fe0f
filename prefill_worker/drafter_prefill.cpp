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
  d->kind_ = o.kind;
  if (o.kind == "self") {
    DQ_RETURN_IF_ERROR(d->LoadSelf(pm, o));
  } else if (o.kind == "dflash") {
    DQ_RETURN_IF_ERROR(d->LoadDFlash(pm, o));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("drafter kind '", o.kind, "': the prefill worker ships self or dflash"));
  }
  DQ_ASSIGN_OR_RETURN(d->senders_, KvSenders::Create(o.senders));
  DQ_ASSIGN_OR_RETURN(d->stager_,
                      KvStager::Create(*d->staging_, o.arena_blocks, d->senders_->any_host()));
  DQ_RETURN_IF_ERROR(d->senders_->Register(d->stager_->host_source(), d->stager_->device_source()));
  return d;
}

absl::Status DrafterPrefill::LoadSelf(const worker::PhaseModel& pm,
                                      const DrafterPrefillOptions& o) {
  DQ_ASSIGN_OR_RETURN(weights_, worker::LoadDrafterWeights(pm, o.weights, o.threads));
  if (weights_->config.vocab_size != pm.runner->config().vocab_size) {
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
  DQ_ASSIGN_OR_RETURN(runner_, ModelRunner::Create(*weights_->checkpoint, weights_->config, ro));
  DQ_ASSIGN_OR_RETURN(staging_, worker::CreateKvStaging(*runner_, pm.device));
  fingerprint_ = worker::DrafterFingerprint(*weights_);
  layout_ = worker::DrafterKvLayout(*runner_, *staging_);
  return absl::OkStatus();
}

absl::Status DrafterPrefill::LoadDFlash(const worker::PhaseModel& pm,
                                        const DrafterPrefillOptions& o) {
  if (o.weights.weights.empty() || !o.weights.format.empty() || o.weights.group_size != 0) {
    return absl::InvalidArgumentError(
        "--speculative dflash needs --draft-weights DIR (the decode worker's DFlash drafter) "
        "and no --draft-format/--draft-group-size");
  }
  DFlashDrafterOptions d;
  d.threads = o.threads;
  d.kv_block_size = pm.runner->kv_pool().block_size();
  d.kv_capacity = o.kv_capacity_tokens;
  // Its target parts bind to this phase's weights; only fc, the norms and each layer's k/v
  // projections run here (WriteContext).
  DQ_ASSIGN_OR_RETURN(dflash_,
                      DFlashDrafter::Load(o.weights.weights, *pm.phase_weights().checkpoint,
                                          pm.runner->config(), d, &dflash_checkpoint_));
  const ModelConfig& target = pm.runner->config();
  capture_ = std::make_unique<HiddenCapture>(dflash_->target_layers(), target.num_layers,
                                             target.hidden_size);
  staging_ = worker::CreateHostKvStaging(dflash_->kv_pool());
  fingerprint_ = worker::DFlashFingerprint(dflash_->config(), *dflash_checkpoint_);
  layout_ = worker::DrafterKvLayout("dflash", dflash_->kv_pool(), *staging_);
  return absl::OkStatus();
}

DrafterPrefill::~DrafterPrefill() = default;

KvBlockPool& DrafterPrefill::kv_pool() { return dflash_ ? dflash_->kv_pool() : runner_->kv_pool(); }

void DrafterPrefill::AddTargetHooks(ForwardHooks* hooks) {
  if (!capture_) return;
  ForwardHooks taps = capture_->Hooks();
  hooks->tap_layers = std::move(taps.tap_layers);
  hooks->on_layer_output = std::move(taps.on_layer_output);
}

absl::Status DrafterPrefill::Forward(std::span<const DrafterChunk> chunks) {
  if (dflash_) {
    std::vector<DFlashDrafter::ContextChunk> context;
    for (const DrafterChunk& c : chunks) {
      const auto rows = capture_->Rows(c.target_row, static_cast<int64_t>(c.tokens.size()));
      if (rows.empty()) {
        return absl::InternalError("the target's pass captured no hidden states for the drafter");
      }
      context.push_back({c.kv, c.start, rows});
    }
    return dflash_->WriteContext(context, [&](int layer) { stager_->LayerWritten(layer); });
  }
  Batch batch{Phase::kPrefill, {}};
  for (const DrafterChunk& c : chunks) batch.items.push_back({c.kv, c.tokens, false});
  ForwardHooks hooks;
  hooks.on_layer_kv_written = [&](int layer) { stager_->LayerWritten(layer); };
  BatchLogits logits;
  return runner_->Forward(batch, &logits, hooks);
}

std::string DrafterPrefill::Mismatch(const v1::StatePart& part) const {
  std::vector<std::string> why;
  const std::string layout = worker::KvLayoutMismatch(part.kv_layout(), layout_);
  if (!layout.empty()) why.push_back(absl::StrCat("the drafter's KV layout differs: ", layout));
  if (part.fingerprint() != fingerprint_) {
    why.push_back(absl::StrCat("the decode worker drafts with weights ", part.fingerprint(),
                               ", this prefill worker's drafter is ", fingerprint_,
                               "; give both workers the same --speculative, "
                               "--draft-format/--draft-group-size (or --draft-weights) and "
                               "--model"));
  }
  if (senders_->Find(part.endpoint().transport()) == nullptr) {
    why.push_back(absl::StrCat("the drafter's regions want KV transport '",
                               part.endpoint().transport(), "', this worker has ",
                               absl::StrJoin(senders_->kinds(), ", ")));
  }
  return absl::StrJoin(why, "; ");
}

absl::StatusOr<std::unique_ptr<LeaseWriter>> DrafterPrefill::Writer(const std::string& lease_id,
                                                                    const v1::StatePart& part,
                                                                    int num_tokens,
                                                                    int io_timeout_ms) {
  KvSender* sender = senders_->Find(part.endpoint().transport());
  if (sender == nullptr) return absl::FailedPreconditionError(Mismatch(part));
  DQ_ASSIGN_OR_RETURN(LeasePlan plan,
                      LeasePlan::Create(absl::StrCat("lease ", lease_id, " (drafter)"), part,
                                        num_tokens, sender->geometry));
  return LeaseWriter::Create(*sender, std::move(plan), part, io_timeout_ms);
}

}  // namespace dq::prefill
