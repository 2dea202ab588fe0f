// ActiveRequest: a request's decode phase, from the committed lease to its result (the first
// token, the decode worker's stream, stop strings, the outcome).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/request_control.h"
#include "router/request_pipeline.h"
#include "router/rpc_errors.h"
#include "router/worker_requests.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace v1 = dqserve::v1;
using request_detail::DrafterPromptName;
using request_detail::OutcomeOf;
using request_detail::PastDeadline;
using request_detail::Seconds;
using request_detail::WorkerLost;

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
  OutputAssembler out(pipeline_->model_.tokenizer, input_.sampling.stop, input_.keep_special_ids,
                      input_.sampling.min_tokens);
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
  bool worker_ended = false;
  for (;;) {
    if (!reader->Read(&response)) {
      worker_ended = true;
      break;
    }
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
  // the request's blocks. Not after the worker ended the stream itself: a cancel then can replace
  // the worker's status with a local CANCELLED, which reads as a worker that went away.
  if (!worker_ended && (!st.finished || st.finish_reason == v1::FINISH_REASON_ERROR)) {
    ctx.TryCancel();
  }
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
      m.ObservePhase("decode", decode_->identity().checkpoint().scheme(),
                     Seconds(st.last_token_at - *st.first_token_at), out.tokens() - 1);
    }
    m.e2e_request_latency.Observe(Seconds(SchedulerClock::now() - created_at_));
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
  // A failed connection marks the worker down. A CANCELLED nobody here asked for may be a worker
  // that died (a crash can reset the stream) or one that ended this one call: a probe tells
  // which, so one request's odd ending never takes a healthy worker out of service.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    pipeline_->registry_.MarkDown(WorkerRole::kDecode, address, s.error_message());
  } else if (s.error_code() == grpc::StatusCode::CANCELLED) {
    pipeline_->registry_.Recheck(WorkerRole::kDecode, address);
  }
  return fail(OutcomeOf(s, false),
              WorkerCallError(absl::StrCat("decode worker ", address, " failed mid-stream"), s));
}

}  // namespace dq::router
