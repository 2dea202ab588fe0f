#include "router/request_pipeline.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/rpc_errors.h"
#include "router/worker_requests.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace v1 = dqserve::v1;

// The cancel path of one live request: whichever gRPC call it has in flight, and why it was
// cancelled. Shared between the request's thread and Abort / health / shutdown callers.
struct RequestControl {
  std::mutex mu;
  std::string id;
  grpc::ClientContext* call = nullptr;
  bool aborted = false;        // Abort RPC or shutdown: ends with finish_reason "abort"
  std::string worker_failure;  // a worker of this request was declared dead: ends in error
  std::string prefill_address;
  std::string decode_address;

  void SetCall(grpc::ClientContext* ctx) {
    std::lock_guard lock(mu);
    call = ctx;
    // gRPC applies a cancel made before the call starts when it starts.
    if (aborted || !worker_failure.empty()) ctx->TryCancel();
  }
  void ClearCall() {
    std::lock_guard lock(mu);
    call = nullptr;
  }
  void Cancel(bool abort, const std::string& failure) {
    std::lock_guard lock(mu);
    if (abort) aborted = true;
    if (!failure.empty() && worker_failure.empty()) worker_failure = failure;
    if (call != nullptr) call->TryCancel();
  }
  bool is_aborted() {
    std::lock_guard lock(mu);
    return aborted;
  }
  std::string failure() {
    std::lock_guard lock(mu);
    return worker_failure;
  }
};

namespace {

Outcome OutcomeOf(const grpc::Status& s, bool aborted) {
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Outcome::kTimeout;
    case grpc::StatusCode::CANCELLED:
      return aborted ? Outcome::kAbort : Outcome::kError;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return Outcome::kBadRequest;
    default:
      return Outcome::kError;
  }
}

ApiError Aborted(const std::string& id) {
  return ApiError{499, "invalid_request_error", absl::StrCat("Request ", id, " was aborted."), "",
                  "aborted"};
}

// A worker cancels a call whose deadline it saw pass (it gets the deadline with the call), often
// before this side's timer fires: that is the request's timeout, not a worker that went away (which
// would mark a healthy worker down).
grpc::Status PastDeadline(grpc::Status s, SchedulerClock::time_point deadline) {
  if (s.error_code() != grpc::StatusCode::CANCELLED || SchedulerClock::now() < deadline) return s;
  return grpc::Status(
      grpc::StatusCode::DEADLINE_EXCEEDED,
      absl::StrCat("the worker ended the call at the deadline (", s.error_message(), ")"));
}

// A worker of the request was declared dead (health checks) and the router cancelled its call.
ApiError WorkerLost(const std::string& failure) {
  return ApiError{503, "server_error", absl::StrCat(failure, "; the request was lost. Retry."), "",
                  "worker_unavailable"};
}

double Seconds(SchedulerClock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string DrafterPromptName(v1::DrafterPrompt p) {
  switch (p) {
    case v1::DRAFTER_PROMPT_SHIPPED:
      return "shipped";
    case v1::DRAFTER_PROMPT_RECOMPUTED:
      return "recomputed";
    default:
      return "";
  }
}

}  // namespace

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
    const bool transfer = FailureReasonOf(s) == v1::FAILURE_REASON_KV_TRANSFER;
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

ActiveRequest::ActiveRequest(RequestPipeline* pipeline, GenerationInput input)
    : pipeline_(pipeline),
      input_(std::move(input)),
      control_(std::make_shared<RequestControl>()),
      lease_(input_.request_id, pipeline->options_.release_timeout) {
  control_->id = input_.request_id;
}

ActiveRequest::~ActiveRequest() {
  lease_.End("the request ended before decoding");
  decode_.reset();
  if (admitted_) pipeline_->scheduler_.Release(input_.request_id);
  if (control_) pipeline_->Unregister(input_.request_id);
}

const std::string& ActiveRequest::id() const { return input_.request_id; }

struct ActiveRequest::StreamState {
  std::optional<SchedulerClock::time_point> first_token_at;
  SchedulerClock::time_point last_token_at;
  bool finished = false;  // the worker sent its final response
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  std::string worker_error;
  bool stop_string = false;  // the router ended it on a stop string
  bool length_cut = false;   // the router ended it at max_tokens
  bool client_gone = false;
  int skip_tokens = 0;      // tokens at the stream's head the client already has
  int32_t skip_token = -1;  // what the first of them must be (the commit's first token)
  SpecUsage spec;           // the decode worker's latest speculation counters (cumulative)
};

GenerationResult ActiveRequest::Run(const DeltaCallback& on_delta) {
  OutputAssembler out(pipeline_->model_.tokenizer, input_.sampling.stop);
  StreamState st;
  grpc::Status status = grpc::Status::OK;
  if (FeedFirstToken(on_delta, out, st)) {
    // A stop string in the first token (lm-eval's "\n") or a client already gone: the decode
    // worker never sees the request, and its lease is released here.
    lease_.End("the request ended on its first token");
  } else {
    status = StreamDecode(on_delta, out, st);
    // A Decode call that never delivered a response may never have reached the worker.
    lease_.End("the decode stream ended before the worker took the lease");
  }
  return Finalize(Conclude(st, status, out), st, out, on_delta);
}

bool ActiveRequest::FeedFirstToken(const DeltaCallback& on_delta, OutputAssembler& out,
                                   StreamState& st) {
  // The first token came back with the prefill's commit: the client gets it now, not after a
  // round trip through the decode worker, whose stream repeats it first (skipped there).
  Delta delta;
  const v1::PositionLogprobs* lp = input_.logprobs && commit_.has_first_token_logprobs()
                                       ? &commit_.first_token_logprobs()
                                       : nullptr;
  bool ended = FeedToken(commit_.first_token(), lp, out, st, &delta);
  st.skip_tokens = 1;
  st.skip_token = commit_.first_token();
  if (!delta.empty() && !on_delta(delta)) {
    st.client_gone = true;
    ended = true;
  }
  return ended;
}

grpc::Status ActiveRequest::StreamDecode(const DeltaCallback& on_delta, OutputAssembler& out,
                                         StreamState& st) {
  v1::DecodeRequest request;
  request.set_request_id(id());
  *request.mutable_commit() = commit_;
  *request.mutable_sampling() = sampling_;
  request.set_deadline_unix_ms(ToUnixMs(deadline_));
  // The history a drafter proposes from; not needed by a request that opted out.
  if (input_.sampling.speculative) {
    request.mutable_prompt_token_ids()->Assign(input_.prompt_ids.begin(), input_.prompt_ids.end());
  } else {
    request.set_no_speculation(true);
  }

  grpc::ClientContext ctx;
  ctx.set_deadline(ToSystemDeadline(deadline_));
  control_->SetCall(&ctx);
  lease_.HandedToDecode();
  std::unique_ptr<grpc::ClientReaderInterface<v1::DecodeResponse>> reader =
      decode_->decode()->Decode(&ctx, request);
  v1::DecodeResponse response;
  while (reader->Read(&response)) {
    lease_.TakenByWorker();  // it commits before its first response
    Delta delta;
    const bool done = ConsumeResponse(response, out, st, &delta);
    if (!delta.empty() && !on_delta(delta)) {
      st.client_gone = true;
      break;
    }
    if (done) break;
  }
  // Whatever ended the loop early (or a stream the router refused), the worker must stop and free
  // the request's blocks.
  if (!st.finished || st.finish_reason == v1::FINISH_REASON_ERROR) ctx.TryCancel();
  const grpc::Status status = reader->Finish();
  control_->ClearCall();
  return status;
}

GenerationResult ActiveRequest::Finalize(GenerationResult result, const StreamState& st,
                                         OutputAssembler& out, const DeltaCallback& on_delta) {
  if (result.outcome == Outcome::kStop || result.outcome == Outcome::kLength ||
      result.outcome == Outcome::kAbort) {
    Delta tail;
    if (out.Finish(&tail)) {
      result.finish_reason = FinishReason::kStop;
      result.matched_stop = out.matched_stop();
    }
    if (!tail.empty() && !on_delta(tail)) result.outcome = Outcome::kCancelled;
  }
  result.usage =
      Usage{static_cast<int>(input_.prompt_ids.size()), out.tokens(), std::nullopt, cached_tokens_};
  RouterMetrics& m = pipeline_->metrics_;
  if (st.spec.steps > 0) {
    result.usage.speculative = st.spec;
    m.spec_steps.fetch_add(st.spec.steps);
    m.spec_drafted_tokens.fetch_add(st.spec.drafted);
    m.spec_accepted_tokens.fetch_add(st.spec.accepted);
    if (st.spec.drafter_prompt == "shipped") m.spec_drafter_prompts_shipped.fetch_add(1);
    if (st.spec.drafter_prompt == "recomputed") m.spec_drafter_prompts_recomputed.fetch_add(1);
  }
  m.generation_tokens.fetch_add(out.tokens());
  if (st.first_token_at) {
    result.ttft_seconds = Seconds(*st.first_token_at - admitted_at_);
    m.time_to_first_token.Observe(result.ttft_seconds);
    if (out.tokens() > 1) {
      result.tpot_seconds = Seconds(st.last_token_at - *st.first_token_at) / (out.tokens() - 1);
      m.time_per_output_token.Observe(result.tpot_seconds);
    }
  }
  m.Count(result.outcome);
  return result;
}

bool ActiveRequest::ConsumeResponse(const v1::DecodeResponse& response, OutputAssembler& out,
                                    StreamState& st, Delta* delta) {
  const bool with_logprobs = response.logprobs_size() == response.token_ids_size();
  st.spec = SpecUsage{response.spec_steps(), response.draft_tokens_drafted(),
                      std::min(response.draft_tokens_accepted(), response.draft_tokens_drafted()),
                      DrafterPromptName(response.drafter_prompt())};
  for (int i = 0; i < response.token_ids_size(); ++i) {
    if (st.skip_tokens > 0) {
      --st.skip_tokens;
      // worker.proto: the stream starts with the commit's first token. Anything else means the
      // two workers disagree about the request: end it rather than stream a wrong answer.
      if (response.token_ids(i) == st.skip_token) continue;
      st.finished = true;
      st.finish_reason = v1::FINISH_REASON_ERROR;
      st.worker_error = absl::StrCat(
          "the decode worker's stream began with token ", response.token_ids(i),
          ", not the first token the prefill worker committed (", st.skip_token,
          "); check that both workers run the same dqserve version and model, then retry");
      spdlog::warn("request {}: {}", id(), st.worker_error);
      return true;
    }
    const v1::PositionLogprobs* lp =
        input_.logprobs && with_logprobs ? &response.logprobs(i) : nullptr;
    if (FeedToken(response.token_ids(i), lp, out, st, delta)) return true;
  }
  if (response.finished()) {
    st.finished = true;
    st.finish_reason = response.finish_reason();
    st.worker_error = response.error();
    return true;
  }
  return false;
}

bool ActiveRequest::FeedToken(int32_t token, const v1::PositionLogprobs* logprobs,
                              OutputAssembler& out, StreamState& st, Delta* delta) {
  if (out.tokens() >= input_.max_tokens) {
    // The worker enforces max_tokens too; this only guards against one that does not.
    st.length_cut = true;
    return true;
  }
  const auto now = SchedulerClock::now();
  if (!st.first_token_at) st.first_token_at = now;
  st.last_token_at = now;
  if (out.Feed(token, logprobs, delta)) {
    st.stop_string = true;
    return true;
  }
  return false;
}

GenerationResult ActiveRequest::Conclude(StreamState& st, const grpc::Status& status,
                                         OutputAssembler& out) {
  GenerationResult r;
  const std::string address = decode_->address();
  auto fail = [&](Outcome outcome, ApiError e) {
    r.outcome = outcome;
    r.error = std::move(e);
    return r;
  };
  if (st.stop_string) {
    r.outcome = Outcome::kStop;
    r.matched_stop = out.matched_stop();
    return r;
  }
  if (st.length_cut) {
    r.outcome = Outcome::kLength;
    r.finish_reason = FinishReason::kLength;
    return r;
  }
  if (st.client_gone) {
    return fail(Outcome::kCancelled, ApiError{499, "invalid_request_error",
                                              "The client closed the connection.", "", ""});
  }
  if (st.finished) {
    switch (st.finish_reason) {
      case v1::FINISH_REASON_STOP:
        r.outcome = Outcome::kStop;
        return r;
      case v1::FINISH_REASON_LENGTH:
        r.outcome = Outcome::kLength;
        r.finish_reason = FinishReason::kLength;
        return r;
      case v1::FINISH_REASON_ABORT:
        r.outcome = Outcome::kAbort;
        r.finish_reason = FinishReason::kAbort;
        return r;
      default:
        return fail(
            Outcome::kError,
            ApiError{502, "server_error",
                     absl::StrCat("decode worker ", address, " failed: ",
                                  st.worker_error.empty() ? "(no message)" : st.worker_error),
                     "", "worker_error"});
    }
  }
  if (control_->is_aborted()) {
    r.outcome = Outcome::kAbort;
    r.finish_reason = FinishReason::kAbort;
    return r;
  }
  if (const std::string failure = control_->failure(); !failure.empty()) {
    return fail(Outcome::kError, WorkerLost(failure));
  }
  spdlog::warn("request {}: decode stream from {} ended without a final response: {}", id(),
               address, status.ok() ? std::string("(status OK)") : status.error_message());
  grpc::Status s = PastDeadline(status, deadline_);
  if (s.ok()) s = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended without finishing");
  if (s.error_code() == grpc::StatusCode::CANCELLED) {
    // Nobody on this side cancelled it: the worker's end went away (a crash resets the stream).
    s = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     absl::StrCat("the worker closed the stream (", s.error_message(), ")"));
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    pipeline_->registry_.MarkDown(WorkerRole::kDecode, address, s.error_message());
  }
  return fail(OutcomeOf(s, false),
              WorkerCallError(absl::StrCat("decode worker ", address, " failed mid-stream"), s));
}

}  // namespace dq::router
