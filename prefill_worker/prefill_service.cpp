#include "prefill_worker/prefill_service.h"

#include <chrono>

#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "worker_common/lease_parts.h"
#include "worker_common/proto_convert.h"
#include "worker_common/sequence_manifest.h"
#include "worker_common/worker_identity.h"
#include "worker_common/worker_status.h"

namespace dq::prefill {
namespace v1 = dqserve::v1;

namespace {

worker::IdentityOptions IdentityOptionsFor(const PrefillServiceOptions& o,
                                           const KvSenders& senders) {
  return worker::IdentityOptions{"prefill", o.address, senders.kinds()};
}

// The earlier of the request's own deadline and the gRPC call's, on the steady clock.
std::optional<PrefillJob::Clock::time_point> DeadlineOf(const grpc::ServerContext& context,
                                                        int64_t deadline_unix_ms) {
  using SysClock = std::chrono::system_clock;
  std::optional<SysClock::time_point> when;
  if (deadline_unix_ms > 0) {
    when = SysClock::time_point(std::chrono::milliseconds(deadline_unix_ms));
  }
  const SysClock::time_point call = context.deadline();
  // gRPC reports "no deadline" as a time far in the future.
  if (call < SysClock::now() + std::chrono::hours(24 * 365)) {
    when = when ? std::min(*when, call) : call;
  }
  if (!when) return std::nullopt;
  return PrefillJob::Clock::now() +
         std::chrono::duration_cast<PrefillJob::Clock::duration>(*when - SysClock::now());
}

}  // namespace

PrefillService::PrefillService(const worker::PhaseModel& model, PrefillBatcher& batcher,
                               KvSenders& senders, const PrefillServiceOptions& options)
    : model_(model),
      batcher_(batcher),
      senders_(senders),
      options_(options),
      caller_(options.worker_key),
      identity_(worker::WorkerIdentityOf(model, IdentityOptionsFor(options, senders))) {
  if (options.drafter != nullptr) {
    // The drafter KV it can write beside the target's (optional: a decode worker with another
    // drafter computes its own).
    worker::AddManifestPart(
        identity_.mutable_manifest(),
        worker::PagedKvPart(v1::STATE_PART_ROLE_DRAFTER, options.drafter->layout(),
                            options.drafter->fingerprint()));
  }
}

v1::WorkerIdentity PrefillService::identity() const {
  std::lock_guard lock(identity_mu_);
  return identity_;
}

void PrefillService::set_address(const std::string& address) {
  std::lock_guard lock(identity_mu_);
  identity_.set_address(address);
}

absl::Status PrefillService::CheckPrompt(const v1::PrefillRequest& request) const {
  const ModelConfig& c = model_.runner->config();
  const int n = request.prompt_token_ids_size();
  if (n == 0) return absl::InvalidArgumentError("prompt_token_ids is empty; send the prompt");
  if (n >= c.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", n,
                                                   " tokens; the model's context is ",
                                                   c.max_context, " tokens; shorten the prompt"));
  }
  for (int i = 0; i < n; ++i) {
    const int32_t t = request.prompt_token_ids(i);
    if (t < 0 || t >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", i, " has id ", t, ", not in [0, ", c.vocab_size, ")"));
    }
  }
  const KvBlockPool& pool = model_.runner->kv_pool();
  if (pool.BlocksFor(n) > pool.options().num_blocks) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the prompt needs ", pool.BlocksFor(n), " KV blocks but this worker's pool ", "holds ",
        pool.options().num_blocks, "; restart it with a larger --kv-capacity"));
  }
  return absl::OkStatus();
}

absl::Status PrefillService::CheckLease(const v1::KvLease& lease) const {
  DQ_RETURN_IF_ERROR(worker::CheckLeaseParts(lease));
  const v1::StatePart& target = *worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET);
  // Against this worker's manifest part (its layout and KV layers), as at handshake.
  const std::string mismatch = worker::PartLayoutMismatch(target, identity().manifest().parts(0));
  if (!mismatch.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease.lease_id(), " is for another KV layout: ", mismatch));
  }
  if (senders_.Find(target.endpoint().transport()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.lease_id(), " wants KV transport '", target.endpoint().transport(),
        "' but this prefill worker supports only: ", absl::StrJoin(senders_.kinds(), ", ")));
  }
  return absl::OkStatus();
}

absl::Status PrefillService::CheckStatePart(const v1::KvLease& lease) const {
  const v1::StatePart* part =
      worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT);
  const std::string& arch = model_.runner->config().architecture;
  if (!model_.state_slot) {
    if (part == nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.lease_id(), " has a target state slot part, but this prefill worker's ",
        arch, " keeps no recurrent state; pair it with a decode worker of the same model"));
  }
  if (part == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.lease_id(), " has no target state slot part, but ", arch,
        " keeps recurrent state per sequence (Gated DeltaNet layers): the decode worker would "
        "decode from a zero state; pair this worker with a decode worker of the same model"));
  }
  const std::string mismatch =
      worker::StateSlotLayoutMismatch(part->slot_layout(), *model_.state_slot);
  if (!mismatch.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease.lease_id(), " is for another state slot layout: ", mismatch));
  }
  if (senders_.Find(part->endpoint().transport()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.lease_id(), " wants its state slot over transport '",
        part->endpoint().transport(),
        "' but this prefill worker supports only: ", absl::StrJoin(senders_.kinds(), ", ")));
  }
  return absl::OkStatus();
}

absl::Status PrefillService::PrepareState(const v1::KvLease& lease, PrefillJob& job) {
  if (!model_.state_slot) return absl::OkStatus();
  const v1::StatePart& part =
      *worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT);
  KvSender* sender = senders_.Find(part.endpoint().transport());  // CheckStatePart found it
  DQ_ASSIGN_OR_RETURN(
      job.state_writer,
      StateSlotWriter::Create(*sender, part, model_.runner->kv_pool().state_slots().slot_bytes(),
                              options_.io_timeout_ms));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<PrefillJob>> PrefillService::MakeJob(
    const grpc::ServerContext& context, const v1::PrefillRequest& request) {
  DQ_RETURN_IF_ERROR(CheckPrompt(request));
  if (!request.has_lease()) return absl::InvalidArgumentError("the request has no KV lease");
  if (absl::Status lease = CheckLease(request.lease()); !lease.ok()) {
    return worker::WithFailureReason(std::move(lease), v1::FAILURE_REASON_KV_TRANSFER);
  }
  if (absl::Status state = CheckStatePart(request.lease()); !state.ok()) {
    return worker::WithFailureReason(std::move(state), v1::FAILURE_REASON_STATE_TRANSFER);
  }
  const ModelConfig& c = model_.runner->config();
  const int n = request.prompt_token_ids_size();
  auto job = std::make_shared<PrefillJob>();
  DQ_ASSIGN_OR_RETURN(job->sampling,
                      worker::SamplingFromProto(request.sampling(), c.vocab_size, c.max_context - n,
                                                model_.grammars.get()));
  job->request_id = request.request_id();
  job->prompt.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  job->logprobs = request.sampling().logprobs();
  job->top_logprobs = static_cast<int>(request.sampling().top_logprobs());
  job->prompt_logprobs = request.prompt_logprobs();
  job->deadline = DeadlineOf(context, request.deadline_unix_ms());
  if (job->deadline && *job->deadline <= PrefillJob::Clock::now()) {
    return absl::DeadlineExceededError("the request's deadline passed before prefill started");
  }
  // CheckLease found the target part and its sender; the sender's sources' layout gives the
  // local offsets.
  const v1::KvLease& lease = request.lease();
  const v1::StatePart& target = *worker::FindPart(lease, v1::STATE_PART_ROLE_TARGET);
  KvSender* sender = senders_.Find(target.endpoint().transport());
  // The part's regions do not fit this prompt, or its endpoint cannot be reached.
  absl::StatusOr<LeasePlan> plan =
      LeasePlan::Create(absl::StrCat("lease ", lease.lease_id()), target, n, sender->geometry);
  if (!plan.ok()) {
    return worker::WithFailureReason(plan.status(), v1::FAILURE_REASON_KV_TRANSFER);
  }
  absl::StatusOr<std::unique_ptr<LeaseWriter>> writer =
      LeaseWriter::Create(*sender, std::move(*plan), target, options_.io_timeout_ms);
  if (!writer.ok()) {
    return worker::WithFailureReason(writer.status(), v1::FAILURE_REASON_KV_TRANSFER);
  }
  job->writer = std::move(*writer);
  if (absl::Status state = PrepareState(lease, *job); !state.ok()) {
    return worker::WithFailureReason(std::move(state), v1::FAILURE_REASON_STATE_TRANSFER);
  }
  if (const v1::StatePart* drafter = worker::FindPart(lease, v1::STATE_PART_ROLE_DRAFTER)) {
    PrepareDrafter(lease.lease_id(), *drafter, *job);
  }
  return job;
}

void PrefillService::PrepareDrafter(const std::string& lease_id, const v1::StatePart& part,
                                    PrefillJob& job) {
  std::string why;
  if (options_.drafter == nullptr) {
    why =
        "this prefill worker runs no drafter; start it with the decode worker's --draft-format "
        "(or --draft-weights) to ship the drafter's prompt KV";
  } else {
    why = options_.drafter->Mismatch(part);
  }
  if (why.empty()) {
    auto writer = options_.drafter->Writer(lease_id, part, static_cast<int>(job.prompt.size()),
                                           options_.io_timeout_ms);
    if (writer.ok()) {
      job.drafter_writer = std::move(*writer);
      return;
    }
    why = writer.status().ToString();
  }
  spdlog::info("prefill {}: the decode worker computes the drafter's prompt KV: {}", job.request_id,
               why);
  job.drafter_skipped = why;
}

void PrefillService::AwaitJob(grpc::ServerContext& context, PrefillJob& job) {
  std::unique_lock lock(job.mu);
  while (!job.finished) {
    // The sync API has no cancel callback: look every few milliseconds.
    job.cv.wait_for(lock, std::chrono::milliseconds(20));
    if (!job.finished && !job.cancelled && context.IsCancelled()) job.cancelled = true;
  }
}

grpc::Status PrefillService::Prefill(grpc::ServerContext* context,
                                     const v1::PrefillRequest* request,
                                     v1::PrefillResponse* response) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  const std::string& id = request->request_id();
  const auto received = PrefillJob::Clock::now();
  auto job = MakeJob(*context, *request);
  if (!job.ok()) {
    spdlog::info("prefill {}: refused: {}", id, job.status().ToString());
    return worker::ToGrpc(job.status());
  }
  spdlog::debug(
      "prefill {}: {} tokens into lease {} (set up in {:.1f} ms)", id,
      request->prompt_token_ids_size(), request->lease().lease_id(),
      std::chrono::duration<double, std::milli>(PrefillJob::Clock::now() - received).count());
  batcher_.Submit(*job);
  AwaitJob(*context, **job);
  PrefillJob& j = **job;
  absl::Status status = j.status;
  if (absl::IsCancelled(status) && j.deadline && PrefillJob::Clock::now() >= *j.deadline) {
    status = absl::DeadlineExceededError("the request's deadline passed during prefill");
  }
  if (!status.ok()) {
    spdlog::info("prefill {}: failed: {}", id, status.ToString());
    return worker::ToGrpc(status);
  }
  const PrefillResult& r = j.result;
  response->set_request_id(id);
  v1::KvCommit* commit = response->mutable_commit();
  commit->set_lease_id(request->lease().lease_id());
  commit->set_num_tokens(static_cast<uint32_t>(j.prompt.size()));
  commit->set_first_token(r.first_token);
  if (r.first_token_logprobs) *commit->mutable_first_token_logprobs() = *r.first_token_logprobs;
  commit->set_sampler_draws(r.sampler_draws);
  for (const v1::StatePart& part : request->lease().parts()) {
    const bool drafter = part.role() == v1::STATE_PART_ROLE_DRAFTER;
    // The target's parts (KV, state slot) were written, or the request failed.
    worker::CommitPart(commit, part.role(),
                       !drafter || r.drafter_kv    ? std::string()
                       : r.drafter_skipped.empty() ? std::string("not written")
                                                   : r.drafter_skipped,
                       part.kind());
  }
  response->set_compute_ms(static_cast<float>(r.compute_ms));
  response->set_transfer_ms(static_cast<float>(r.transfer_ms));
  response->set_transfer_bytes(r.transfer_bytes);
  response->set_state_transfer_bytes(r.state_transfer_bytes);
  response->set_cached_tokens(static_cast<uint32_t>(r.cached_tokens));
  for (const v1::PositionLogprobs& p : r.prompt_logprobs) *response->add_prompt_logprobs() = p;
  spdlog::debug(
      "prefill {}: done in {:.1f} ms: compute {:.1f} ms, transfer {:.1f} ms ({} bytes; {:.1f} ms "
      "of it after the compute), {} prompt tokens from the prefix cache",
      id, std::chrono::duration<double, std::milli>(PrefillJob::Clock::now() - received).count(),
      r.compute_ms, r.transfer_ms, r.transfer_bytes, r.transfer_wait_ms, r.cached_tokens);
  return grpc::Status::OK;
}

grpc::Status PrefillService::Handshake(grpc::ServerContext* context,
                                       const v1::HandshakeRequest* request,
                                       v1::HandshakeResponse* response) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  const v1::WorkerIdentity self = identity();
  *response = worker::AnswerHandshake(self, *request);
  if (!response->kv_layout_compatible()) {
    spdlog::warn("handshake from {}: {}", request->caller(), response->mismatch());
  } else if (const std::string drafters = worker::OptionalPartDifferences(
                 request->expected_manifest(), self.manifest(), "the decode worker");
             !drafters.empty() && request->expected_manifest().parts_size() > 0) {
    spdlog::info("handshake from {}: {}; the decode worker computes such drafter KV itself",
                 request->caller(), drafters);
  }
  return grpc::Status::OK;
}

grpc::Status PrefillService::Health(grpc::ServerContext* context, const v1::WorkerHealthRequest*,
                                    v1::WorkerHealthResponse* response) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  const PrefillLoad load = batcher_.load();
  response->set_status(v1::SERVING_STATUS_SERVING);
  *response->mutable_identity() = identity();
  response->set_free_kv_blocks(load.free_kv_blocks);
  response->set_total_kv_blocks(load.total_kv_blocks);
  response->set_running_requests(load.running);
  response->set_queued_requests(load.queued);
  response->set_prefix_queried_blocks(static_cast<uint64_t>(load.prefix.queried_blocks));
  response->set_prefix_hit_blocks(static_cast<uint64_t>(load.prefix.hit_blocks));
  response->set_prefix_evicted_blocks(static_cast<uint64_t>(load.prefix.evicted_blocks));
  response->set_prefix_cached_blocks(static_cast<uint32_t>(load.prefix.cached_blocks));
  response->set_free_state_slots(static_cast<uint32_t>(load.free_state_slots));
  response->set_total_state_slots(static_cast<uint32_t>(load.total_state_slots));
  return grpc::Status::OK;
}

}  // namespace dq::prefill
