#include "router/request_pipeline.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/request_control.h"
#include "router/rpc_errors.h"
#include "router/worker_requests.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace v1 = dqserve::v1;

using request_detail::Aborted;
using request_detail::OutcomeOf;
using request_detail::PastDeadline;
using request_detail::Seconds;
using request_detail::WorkerLost;

// ---- RequestPipeline ----

RequestPipeline::RequestPipeline(PipelineOptions options, const ServedModel& model,
                                 Scheduler& scheduler, WorkerRegistry& registry,
                                 RouterMetrics& metrics)
    : options_(options),
      model_(model),
      scheduler_(scheduler),
      registry_(registry),
      metrics_(metrics) {}

std::optional<ApiError> RequestPipeline::Register(const std::shared_ptr<RequestControl>& control) {
  std::lock_guard lock(mu_);
  if (closing_) {
    return ServiceUnavailable("The router is shutting down; retry against another instance.");
  }
  if (!live_.emplace(control->id, control).second) {
    return ApiError{409, "invalid_request_error",
                    absl::StrCat("Request id '", control->id,
                                 "' is already in use by a live request; use a unique id."),
                    "request_id", "duplicate_request_id"};
  }
  return std::nullopt;
}

void RequestPipeline::Unregister(const std::string& id) {
  std::lock_guard lock(mu_);
  live_.erase(id);
}

bool RequestPipeline::Abort(const std::string& request_id) {
  std::shared_ptr<RequestControl> control;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(request_id);
    if (it == live_.end()) return false;
    control = it->second;
  }
  control->Cancel(/*abort=*/true, "");
  scheduler_.Cancel(request_id);  // when still queued
  return true;
}

void RequestPipeline::AbortAll(const std::string& reason) {
  std::vector<std::string> ids;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, control] : live_) ids.push_back(id);
  }
  if (!ids.empty()) spdlog::info("aborting {} live requests: {}", ids.size(), reason);
  for (const std::string& id : ids) Abort(id);
}

void RequestPipeline::Close() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  AbortAll("the router is shutting down");
}

void RequestPipeline::FailRequestsOn(WorkerRole role, const std::string& address,
                                     const std::string& reason) {
  std::vector<std::shared_ptr<RequestControl>> hit;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, control] : live_) {
      std::lock_guard c(control->mu);
      const std::string& a =
          role == WorkerRole::kDecode ? control->decode_address : control->prefill_address;
      if (a == address) hit.push_back(control);
    }
  }
  for (const auto& control : hit) {
    control->Cancel(/*abort=*/false, absl::StrCat(std::string(WorkerRoleName(role)), " worker ",
                                                  address, " stopped answering (", reason, ")"));
  }
}

StartResult RequestPipeline::Fail(Outcome outcome, ApiError error) {
  metrics_.Count(outcome);
  StartResult r;
  r.error = std::move(error);
  return r;
}

StartResult RequestPipeline::Start(GenerationInput input) {
  auto r = std::unique_ptr<ActiveRequest>(new ActiveRequest(this, std::move(input)));
  if (auto e = Register(r->control_)) {
    r->control_.reset();  // not ours to unregister
    return Fail(e->http_status == 503 ? Outcome::kRejected : Outcome::kBadRequest, *e);
  }
  if (std::optional<StartResult> refused = Admit(*r)) return std::move(*refused);
  metrics_.prompt_tokens.fetch_add(r->input_.prompt_ids.size());

  ApiResult<WorkerHandle> decode = PickDecode(r->input_.prompt_ids);
  if (!decode.ok()) return Fail(Outcome::kError, decode.error());
  ApiResult<WorkerHandle> prefill = registry_.Pick(WorkerRole::kPrefill);
  if (!prefill.ok()) return Fail(Outcome::kError, prefill.error());
  {
    std::lock_guard lock(r->control_->mu);
    r->control_->decode_address = decode->address();
    r->control_->prefill_address = prefill->address();
  }
  r->decode_.emplace(std::move(decode).value());

  WireSamplingOptions wire;
  wire.max_tokens = r->input_.max_tokens;
  wire.seed = SeedFor(r->input_.sampling);
  wire.logprobs = r->input_.logprobs;
  wire.top_logprobs = r->input_.top_logprobs;
  r->sampling_ = ToWireSampling(r->input_.sampling, wire);

  const auto t0 = SchedulerClock::now();
  if (auto e = Reserve(*r, *prefill)) return StartResult{nullptr, *e, ""};
  const auto t1 = SchedulerClock::now();
  if (auto e = Prefill(*r, *prefill)) return StartResult{nullptr, *e, ""};
  metrics_.ObservePhase("prefill", prefill->identity().checkpoint().scheme(),
                        Seconds(SchedulerClock::now() - t1), r->input_.prompt_ids.size());
  // Where a request's time to first token goes, for tuning a deployment (--log-level debug).
  spdlog::debug("request {}: admitted to Reserve {:.1f} ms, Reserve {:.1f} ms, Prefill {:.1f} ms",
                r->id(), 1e3 * Seconds(t0 - r->admitted_at_), 1e3 * Seconds(t1 - t0),
                1e3 * Seconds(SchedulerClock::now() - t1));
  StartResult ok;
  ok.request = std::move(r);
  return ok;
}

std::optional<StartResult> RequestPipeline::Admit(ActiveRequest& r) {
  const auto now = SchedulerClock::now();
  r.deadline_ = now + options_.request_timeout;
  if (r.input_.deadline) r.deadline_ = std::min(r.deadline_, *r.input_.deadline);
  EnqueueResult enq =
      scheduler_.Enqueue(r.id(), std::min(r.deadline_, now + options_.queue_timeout));
  if (!enq.ok()) {
    StartResult refused = Fail(Outcome::kRejected, enq.error);
    refused.retry_after = enq.retry_after;
    return refused;
  }
  absl::Status waited = enq.ticket->Wait();
  if (!waited.ok()) {
    if (r.control_->is_aborted()) return Fail(Outcome::kAbort, Aborted(r.id()));
    const bool timed_out = waited.code() == absl::StatusCode::kDeadlineExceeded;
    return Fail(timed_out ? Outcome::kTimeout : Outcome::kCancelled, FromStatus(waited));
  }
  r.admitted_ = true;
  r.admitted_at_ = SchedulerClock::now();
  return std::nullopt;
}

ApiResult<WorkerHandle> RequestPipeline::PickDecode(const std::vector<int32_t>& prompt) {
  const std::optional<v1::KvLayout> layout = registry_.reference_layout();
  const int block_size = layout ? static_cast<int>(layout->block_size()) : 0;
  const auto match = affinity_.Longest(prompt, block_size, [&](std::string_view worker) {
    return registry_.IsLivePrefixCache(worker);
  });
  ApiResult<WorkerHandle> decode =
      registry_.Pick(WorkerRole::kDecode, match ? std::string_view(match->worker) : "");
  if (decode.ok() && decode->identity().prefix_cache()) {
    affinity_.Record(decode->address(), prompt, block_size);
  }
  return decode;
}

std::optional<ApiError> RequestPipeline::Reserve(ActiveRequest& r, const WorkerHandle& prefill) {
  const WorkerHandle& decode = *r.decode_;
  v1::ReserveRequest request;
  request.set_request_id(r.id());
  request.set_num_tokens(static_cast<uint32_t>(r.input_.prompt_ids.size()));
  request.set_max_new_tokens(static_cast<uint32_t>(r.input_.max_tokens));
  // For a decode worker's prefix cache (leased cached blocks are not shipped again).
  request.mutable_prompt_token_ids()->Assign(r.input_.prompt_ids.begin(),
                                             r.input_.prompt_ids.end());
  for (const std::string& t : prefill.identity().transports()) request.add_transports(t);
  request.set_deadline_unix_ms(ToUnixMs(r.deadline_));

  grpc::ClientContext ctx;
  ctx.set_deadline(ToSystemDeadline(r.deadline_));
  r.control_->SetCall(&ctx);
  v1::KvLease lease;
  const grpc::Status s = PastDeadline(decode.decode()->Reserve(&ctx, request, &lease), r.deadline_);
  r.control_->ClearCall();
  if (s.ok()) {
    r.lease_.Reserved(decode.decode(), std::move(lease));
    return std::nullopt;
  }
  const bool aborted = r.control_->is_aborted();
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      s.error_code() == grpc::StatusCode::CANCELLED) {
    // The worker may have reserved before the call ended on this side; its answer is lost.
    DecodeLease::ReleaseUnknown(decode.decode(), r.id(), "Reserve cancelled or past deadline",
                                options_.release_timeout);
  }
  metrics_.Count(OutcomeOf(s, aborted));
  if (aborted) return Aborted(r.id());
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    registry_.MarkDown(WorkerRole::kDecode, decode.address(), s.error_message());
  }
  spdlog::warn("request {}: Reserve on decode worker {} failed: {}", r.id(), decode.address(),
               s.error_message());
  return WorkerCallError(
      absl::StrCat("decode worker ", decode.address(), " could not reserve KV blocks"), s);
}

std::optional<ApiError> RequestPipeline::Prefill(ActiveRequest& r, const WorkerHandle& prefill) {
  v1::PrefillRequest request;
  request.set_request_id(r.id());
  request.mutable_prompt_token_ids()->Assign(r.input_.prompt_ids.begin(),
                                             r.input_.prompt_ids.end());
  *request.mutable_sampling() = r.sampling_;
  *request.mutable_lease() = r.lease_.lease();
  request.set_deadline_unix_ms(ToUnixMs(r.deadline_));
  request.set_prompt_logprobs(r.input_.prompt_logprobs);

  grpc::ClientContext ctx;
  ctx.set_deadline(ToSystemDeadline(r.deadline_));
  v1::PrefillResponse response;
  r.control_->SetCall(&ctx);
  const grpc::Status s =
      PastDeadline(prefill.prefill()->Prefill(&ctx, request, &response), r.deadline_);
  r.control_->ClearCall();
  const bool aborted = r.control_->is_aborted();
  if (!s.ok() || aborted) {
    r.lease_.End(s.ok() ? "aborted" : absl::StrCat("prefill failed: ", s.error_message()));
    metrics_.Count(s.ok() ? Outcome::kAbort : OutcomeOf(s, aborted));
    if (aborted) return Aborted(r.id());
    if (const std::string failure = r.control_->failure(); !failure.empty()) {
      return WorkerLost(failure);
    }
    // A failed KV transfer is about the destination (this request's decode worker: dead,
    // stalled, or its lease expired), not the prefill worker that reported it, and not proof
    // that the decode worker is gone: marking either down here would fail other requests over
    // one bad lease. A dead decode worker is found by the health checks and its own streams.
    const bool transfer = FailureReasonOf(s) == v1::FAILURE_REASON_KV_TRANSFER ||
                          FailureReasonOf(s) == v1::FAILURE_REASON_STATE_TRANSFER;
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !transfer) {
      registry_.MarkDown(WorkerRole::kPrefill, prefill.address(), s.error_message());
    }
    if (transfer) metrics_.kv_transfer_failures.fetch_add(1);
    spdlog::warn("request {}: Prefill on {} failed{}: {}", r.id(), prefill.address(),
                 transfer ? " (KV transfer)" : "", s.error_message());
    if (transfer) {
      return WorkerCallError(
          absl::StrCat("the KV transfer from prefill worker ", prefill.address(),
                       " to decode worker ", r.decode_ ? r.decode_->address() : std::string("?"),
                       " failed"),
          s);
    }
    return WorkerCallError(absl::StrCat("prefill worker ", prefill.address(), " failed"), s);
  }
  metrics_.kv_transfer_bytes.fetch_add(response.transfer_bytes());
  metrics_.state_transfer_bytes.fetch_add(response.state_transfer_bytes());
  metrics_.kv_transfer_micros.fetch_add(
      static_cast<uint64_t>(std::max(0.0f, response.transfer_ms()) * 1000.0f));
  r.commit_ = response.commit();  // the lease stays open until Decode takes the commit
  r.cached_tokens_ = static_cast<int>(response.cached_tokens());
  metrics_.prompt_cached_tokens.fetch_add(response.cached_tokens());
  if (r.input_.prompt_logprobs) {
    const size_t want = r.input_.prompt_ids.empty() ? 0 : r.input_.prompt_ids.size() - 1;
    if (static_cast<size_t>(response.prompt_logprobs_size()) != want) {
      r.lease_.End("prompt logprobs missing");
      metrics_.Count(Outcome::kError);
      return ApiError{
          502, "server_error",
          absl::StrCat("prefill worker ", prefill.address(), " returned ",
                       response.prompt_logprobs_size(), " prompt logprobs for ",
                       r.input_.prompt_ids.size(), " prompt tokens (expected ", want, ")"),
          "", "worker_error"};
    }
    for (const v1::PositionLogprobs& lp : response.prompt_logprobs()) {
      r.prompt_logprobs_.push_back(WithTokenStrings(model_.tokenizer, lp));
    }
  }
  return std::nullopt;
}

// ---- ActiveRequest ----

}  // namespace dq::router
