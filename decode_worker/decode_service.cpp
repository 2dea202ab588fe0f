#include "decode_worker/decode_service.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "worker_common/lease_parts.h"
#include "worker_common/proto_convert.h"
#include "worker_common/worker_identity.h"
#include "worker_common/worker_status.h"

namespace dq::decode {
namespace v1 = dqserve::v1;
using std::chrono::milliseconds;
using worker::ToGrpc;

namespace {

int64_t UnixNowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<milliseconds> DecodeService::CheckReserve(const v1::ReserveRequest& r) const {
  const int max_context = p_.model->runner->config().max_context;
  if (r.request_id().empty()) return absl::InvalidArgumentError("Reserve: empty request_id");
  if (r.num_tokens() == 0 || r.num_tokens() >= static_cast<uint32_t>(max_context)) {
    return absl::InvalidArgumentError(absl::StrCat("Reserve(", r.request_id(), "): num_tokens is ",
                                                   r.num_tokens(), "; it must be in [1, ",
                                                   max_context, ") (the model's context)"));
  }
  const std::string mine(p_.transport->name());
  if (std::find(r.transports().begin(), r.transports().end(), mine) == r.transports().end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Reserve(", r.request_id(), "): this decode worker runs the \"", mine,
                     "\" KV transport only, the request offers [",
                     absl::StrJoin(r.transports(), ", "), "]; start the prefill worker with ", mine,
                     " or the decode worker with --transport ", "matching the prefill worker's"));
  }
  milliseconds ttl(options_.lease_ttl_ms);
  if (r.deadline_unix_ms() > 0) {
    const int64_t left = r.deadline_unix_ms() - UnixNowMs();
    if (left <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("Reserve(", r.request_id(), "): the request's deadline already passed"));
    }
    ttl = std::min(ttl, milliseconds(left));
  }
  return ttl;
}

grpc::Status DecodeService::Reserve(grpc::ServerContext* context, const v1::ReserveRequest* r,
                                    v1::KvLease* out) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  auto ttl = CheckReserve(*r);
  if (!ttl.ok()) return ToGrpc(ttl.status());
  const int64_t max_context = p_.model->runner->config().max_context;
  const int tokens = static_cast<int>(
      std::min<int64_t>(int64_t{r->num_tokens()} + r->max_new_tokens(), max_context));
  const std::span<const int32_t> prompt(r->prompt_token_ids().data(),
                                        static_cast<size_t>(r->prompt_token_ids().size()));
  auto lease = p_.leases->Reserve(r->request_id(), tokens, *ttl,
                                  prompt.size() == r->num_tokens() ? prompt : prompt.first(0));
  if (!lease.ok()) return ToGrpc(lease.status());
  // Every part of the manifest; the free hook releases their regions with the lease.
  auto parts = p_.regions->Register(*lease, static_cast<int>(r->num_tokens()));
  if (!parts.ok()) {
    (void)p_.leases->Release(lease->lease_id);
    return ToGrpc(parts.status());
  }
  // A ttl shorter than registration can end the lease before its regions were recorded, so the
  // free hook missed them; never hand out regions over blocks the pool may reuse.
  if (!p_.leases->Find(lease->lease_id).ok()) {
    ReleaseRegions(lease->lease_id);
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("Reserve(", r->request_id(),
                                     "): the lease expired before it was handed out; raise "
                                     "the deadline or --lease-ttl-ms"));
  }
  if (context->IsCancelled()) {
    // Nobody will receive this lease: free it now rather than at its ttl.
    (void)p_.leases->ReleaseUncommitted(lease->lease_id);
    return grpc::Status(grpc::StatusCode::CANCELLED, "Reserve: the caller cancelled");
  }
  out->set_lease_id(lease->lease_id);
  out->set_request_id(lease->request_id);
  for (v1::StatePart& part : *parts) *out->add_parts() = std::move(part);
  out->set_ttl_ms(static_cast<uint32_t>(ttl->count()));
  spdlog::debug("dq-decode: {} reserved {} for {} tokens ({} blocks in {} runs, {} tokens cached)",
                r->request_id(), lease->lease_id, tokens, lease->blocks.size(), lease->runs.size(),
                lease->cached_tokens);
  return grpc::Status::OK;
}

void DecodeService::ReleaseRegions(const std::string& lease_id) { p_.regions->Release(lease_id); }

absl::StatusOr<DecodeJob> DecodeService::JobOf(const v1::DecodeRequest& r) const {
  const ModelConfig& c = p_.model->runner->config();
  const v1::KvCommit& commit = r.commit();
  if (r.request_id().empty()) return absl::InvalidArgumentError("Decode: empty request_id");
  if (!r.has_commit() || commit.lease_id().empty() || commit.num_tokens() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Decode(", r.request_id(), "): the commit needs a lease_id and num_tokens > 0"));
  }
  if (commit.first_token() < 0 || commit.first_token() >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("Decode(", r.request_id(), "): first_token ",
                                                   commit.first_token(), " is not in [0, ",
                                                   c.vocab_size, ")"));
  }
  if (p_.regions->has_state_slots() &&
      !worker::PartWritten(commit, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT)) {
    // Decoding from a zero (or half-written) recurrent state would be garbage, silently.
    const std::string why =
        worker::PartSkipped(commit, v1::STATE_PART_ROLE_TARGET, v1::STATE_PART_KIND_STATE_SLOT);
    return worker::WithFailureReason(
        absl::FailedPreconditionError(absl::StrCat(
            "Decode(", r.request_id(), "): the commit of lease ", commit.lease_id(),
            " does not say the recurrent state slot was written (",
            why.empty() ? "the prefill worker wrote no state" : why,
            "); the decode worker never recomputes a prompt, so reserve a new lease and re-run "
            "the prefill on a prefill worker of the same hybrid model")),
        v1::FAILURE_REASON_STATE_TRANSFER);
  }
  const int room = std::max<int>(1, c.max_context - static_cast<int>(commit.num_tokens()));
  DecodeJob job;
  DQ_ASSIGN_OR_RETURN(job.params, worker::SamplingFromProto(r.sampling(), c.vocab_size, room,
                                                            p_.model->grammars.get()));
  job.request_id = r.request_id();
  job.lease_id = commit.lease_id();
  job.num_tokens = static_cast<int>(commit.num_tokens());
  job.first_token = commit.first_token();
  job.sampler_draws = commit.sampler_draws();
  if (commit.has_first_token_logprobs()) job.first_logprobs = commit.first_token_logprobs();
  // The drafter proposes tokens from this history, and the model is fed what it proposes.
  for (int32_t id : r.prompt_token_ids()) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("Decode(", r.request_id(),
                                                     "): prompt token id ", id, " is not in [0, ",
                                                     c.vocab_size, ")"));
    }
  }
  job.prompt.assign(r.prompt_token_ids().begin(), r.prompt_token_ids().end());
  job.speculate = !r.no_speculation();
  if (p_.regions->has_drafter_kv() && job.speculate) {
    if (worker::PartWritten(commit, v1::STATE_PART_ROLE_DRAFTER)) {
      job.drafter_kv = p_.regions->TakeDrafterKv(job.lease_id);
    } else {
      const std::string why = worker::PartSkipped(commit, v1::STATE_PART_ROLE_DRAFTER);
      spdlog::info("dq-decode: {}: computing the drafter's prompt KV here: {}", r.request_id(),
                   why.empty() ? "the prefill worker sent none" : why);
    }
  }
  job.logprobs = r.sampling().logprobs();
  job.top_logprobs = static_cast<int>(r.sampling().top_logprobs());
  if (r.deadline_unix_ms() > 0) {
    job.deadline = std::chrono::steady_clock::now() +
                   milliseconds(std::max<int64_t>(0, r.deadline_unix_ms() - UnixNowMs()));
  }
  return job;
}

grpc::Status DecodeService::Decode(grpc::ServerContext* context, const v1::DecodeRequest* r,
                                   grpc::ServerWriter<v1::DecodeResponse>* writer) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  auto job = JobOf(*r);
  if (!job.ok()) {
    // The request is dead either way; do not leave its blocks to the ttl.
    if (r->has_commit()) (void)p_.leases->ReleaseUncommitted(r->commit().lease_id());
    return ToGrpc(job.status());
  }
  const std::string lease_id = job->lease_id;
  if (context->IsCancelled()) {
    // Cancelled before the lease was committed: nobody reads this stream, so the blocks go back
    // now (a committed lease is freed by the batcher's Abort in Pump instead).
    (void)p_.leases->ReleaseUncommitted(lease_id);
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the decode stream");
  }
  auto stream = p_.batcher->Submit(std::move(*job));
  if (!stream.ok()) {
    const absl::StatusCode code = stream.status().code();
    if (code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("KV for lease ", lease_id, " is missing: ", stream.status().message(),
                       "; the decode worker never recomputes a prompt, so "
                       "reserve a new lease and re-run the prefill"));
    }
    return ToGrpc(stream.status());
  }
  // The prefill is done writing (it committed), so the lease's transfer regions can go.
  ReleaseRegions(lease_id);
  return Pump(context, **stream, writer);
}

grpc::Status DecodeService::Pump(grpc::ServerContext* context, DecodeStream& stream,
                                 grpc::ServerWriter<v1::DecodeResponse>* writer) {
  v1::DecodeResponse response;
  for (;;) {
    if (context->IsCancelled()) {
      p_.batcher->Abort(stream.request_id(), "the client cancelled the decode stream");
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the decode stream");
    }
    if (!stream.Take(milliseconds(options_.stream_poll_ms), &response)) continue;
    if (!writer->Write(response)) {
      p_.batcher->Abort(stream.request_id(), "the decode stream broke");
      return grpc::Status(grpc::StatusCode::CANCELLED, "the decode stream broke");
    }
    if (response.finished()) return grpc::Status::OK;
  }
}

grpc::Status DecodeService::Release(grpc::ServerContext* context, const v1::ReleaseRequest* r,
                                    v1::ReleaseResponse* out) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  // Without a lease id: the request's uncommitted lease, for a caller that lost Reserve's answer.
  const bool by_request = r->lease_id().empty() && !r->request_id().empty();
  const std::string& name = by_request ? r->request_id() : r->lease_id();
  absl::Status s = by_request ? p_.leases->ReleaseUncommittedRequest(r->request_id())
                              : p_.leases->ReleaseUncommitted(r->lease_id());
  out->set_found(s.ok());
  if (s.ok()) {
    spdlog::debug("dq-decode: released the lease of {} ({})", name, r->reason());
  } else {
    spdlog::debug("dq-decode: Release({}): {}", name, s.ToString());
  }
  return grpc::Status::OK;
}

grpc::Status DecodeService::Abort(grpc::ServerContext* context, const v1::AbortRequest* r,
                                  v1::AbortResponse* out) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  out->set_found(p_.batcher->Abort(r->request_id(), "aborted by the router"));
  return grpc::Status::OK;
}

grpc::Status DecodeService::Handshake(grpc::ServerContext* context, const v1::HandshakeRequest* r,
                                      v1::HandshakeResponse* out) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  *out = worker::AnswerHandshake(identity(), *r);
  if (!out->kv_layout_compatible()) {
    spdlog::warn("dq-decode: handshake from {}: {}", r->caller(), out->mismatch());
  }
  return grpc::Status::OK;
}

grpc::Status DecodeService::Health(grpc::ServerContext* context, const v1::WorkerHealthRequest*,
                                   v1::WorkerHealthResponse* out) {
  if (grpc::Status caller = caller_.Check(*context); !caller.ok()) return caller;
  const KvLeaseStats s = p_.leases->stats();
  out->set_status(v1::SERVING_STATUS_SERVING);
  *out->mutable_identity() = identity();
  out->set_free_kv_blocks(s.free_blocks);
  out->set_total_kv_blocks(s.total_blocks);
  out->set_running_requests(p_.batcher->running());
  out->set_queued_requests(p_.batcher->queued());
  out->set_open_leases(s.leases_active);
  out->set_prefix_queried_blocks(static_cast<uint64_t>(s.prefix.queried_blocks));
  out->set_prefix_hit_blocks(static_cast<uint64_t>(s.prefix.hit_blocks));
  out->set_prefix_evicted_blocks(static_cast<uint64_t>(s.prefix.evicted_blocks));
  out->set_prefix_cached_blocks(static_cast<uint32_t>(s.prefix.cached_blocks));
  out->set_free_state_slots(static_cast<uint32_t>(s.free_state_slots));
  out->set_total_state_slots(static_cast<uint32_t>(s.total_state_slots));
  return grpc::Status::OK;
}

}  // namespace dq::decode
