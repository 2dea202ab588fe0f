#include "router/grpc_frontend.h"

#include <atomic>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/listen_port.h"
#include "router/auth_and_limits.h"
#include "router/generation_input.h"
#include "router/rpc_errors.h"
#include "spdlog/spdlog.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;

std::string NewRequestId() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "gen-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

// The earlier of the request's own deadline and the gRPC deadline, as a steady time point.
std::optional<SchedulerClock::time_point> RequestDeadline(const grpc::ServerContext* ctx,
                                                          int64_t deadline_unix_ms) {
  std::optional<std::chrono::system_clock::time_point> d;
  if (deadline_unix_ms > 0) {
    d = std::chrono::system_clock::time_point(std::chrono::milliseconds(deadline_unix_ms));
  }
  const auto grpc_deadline = ctx->deadline();
  if (grpc_deadline != std::chrono::system_clock::time_point::max()) {
    d = d ? std::min(*d, grpc_deadline) : grpc_deadline;
  }
  if (!d) return std::nullopt;
  return SchedulerClock::now() + (*d - std::chrono::system_clock::now());
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
    case FinishReason::kToolCalls:  // the gRPC API has no tools; a stop all the same
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
  }
  return v1::FINISH_REASON_ERROR;
}

}  // namespace

v1::GenerateResponse FinalResponse(const std::string& request_id, const GenerationResult& r) {
  v1::GenerateResponse f;
  f.set_request_id(request_id);
  f.set_finished(true);
  if (r.error) {
    // A deadline is an abort in the proto's terms; everything else a server-side error.
    f.set_finish_reason(r.outcome == Outcome::kTimeout ? v1::FINISH_REASON_ABORT
                                                       : v1::FINISH_REASON_ERROR);
    f.set_error(r.error->message);
  } else {
    f.set_finish_reason(ToProto(r.finish_reason));
    if (!r.matched_stop.empty()) f.set_stop_string(r.matched_stop);
  }
  v1::Usage* u = f.mutable_usage();
  u->set_prompt_tokens(r.usage.prompt_tokens);
  u->set_completion_tokens(r.usage.completion_tokens);
  u->set_ttft_ms(static_cast<float>(r.ttft_seconds * 1000));
  u->set_tpot_ms(static_cast<float>(r.tpot_seconds * 1000));
  if (const auto& spec = r.usage.speculative) {
    v1::SpeculativeUsage* s = u->mutable_speculative();
    s->set_steps(static_cast<uint32_t>(spec->steps));
    s->set_drafted_tokens(static_cast<uint32_t>(spec->drafted));
    s->set_accepted_tokens(static_cast<uint32_t>(spec->accepted));
    s->set_acceptance_rate(spec->drafted > 0 ? float(spec->accepted) / spec->drafted : 0.0f);
    s->set_acceptance_length(spec->steps > 0 ? float(spec->accepted + spec->steps) / spec->steps
                                             : 0.0f);
    s->set_drafter_prompt(spec->drafter_prompt);
  }
  return f;
}

GrpcFrontend::GrpcFrontend(GrpcFrontendOptions options, RequestPipeline& pipeline,
                           WorkerRegistry& registry)
    : options_(std::move(options)), pipeline_(pipeline), registry_(registry) {
  parse_options_.served_models = {pipeline_.model().name};
  parse_options_.vocab_size = pipeline_.model().vocab_size;
}

GrpcFrontend::~GrpcFrontend() { Shutdown(); }

bool GrpcFrontend::Start() {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port in use fails, never shared
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port),
                           grpc::InsecureServerCredentials(), &bound_port_);
  builder.RegisterService(this);
  AddStandardGrpcServices(builder);
  server_ = builder.BuildAndStart();
  if (!server_ || bound_port_ == 0) {
    const absl::Status why = ProbeListen(options_.host, options_.port);
    spdlog::error(
        "dq-router: cannot serve gRPC on {}:{}: {}", options_.host, options_.port,
        why.ok() ? std::string("the gRPC server did not start") : std::string(why.message()));
    server_.reset();
    return false;
  }
  health_ = std::make_unique<GrpcHealthPublisher>(
      *server_, std::vector<std::string>{dqserve::v1::DqServe::service_full_name()},
      [this] { return registry_.Ready(); });
  spdlog::info("dq-router: gRPC DqServe on {}:{}", options_.host, bound_port_);
  return true;
}

void GrpcFrontend::Shutdown() {
  if (!server_) return;
  health_->Shutdown();  // NOT_SERVING first: Watch callers see the stop
  // Running calls get a second to see their requests aborted, then are cancelled.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_.reset();
}

std::optional<grpc::Status> GrpcFrontend::CheckAuth(const grpc::ServerContext* ctx) const {
  if (options_.api_keys.empty()) return std::nullopt;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string_view header =
      it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  if (auto e = CheckBearerAuth(header, options_.api_keys)) return ToGrpcStatus(*e);
  return std::nullopt;
}

grpc::Status GrpcFrontend::Reject(grpc::ServerContext* ctx, const ApiError& error,
                                  const std::string& retry_after) {
  if (!retry_after.empty()) ctx->AddTrailingMetadata("retry-after", retry_after);
  return ToGrpcStatus(error);
}

grpc::Status GrpcFrontend::Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* request,
                                    grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (auto denied = CheckAuth(ctx)) {
    pipeline_.metrics().Count(Outcome::kBadRequest);
    return *denied;
  }
  ApiResult<GenerationInput> input =
      GenerationFromProto(*request, pipeline_.model(), parse_options_);
  if (!input.ok()) {
    pipeline_.metrics().Count(Outcome::kBadRequest);
    return Reject(ctx, input.error());
  }
  GenerationInput in = std::move(input).value();
  in.request_id = request->request_id().empty() ? NewRequestId() : request->request_id();
  in.deadline = RequestDeadline(ctx, request->deadline_unix_ms());
  const std::string id = in.request_id;
  StartResult start = pipeline_.Start(std::move(in));
  if (!start.ok()) return Reject(ctx, start.error, start.retry_after);

  const bool return_ids = request->return_token_ids();
  const bool logprobs = request->sampling().logprobs();
  GenerationResult r = start.request->Run([&](const Delta& d) {
    if (ctx->IsCancelled()) return false;
    v1::GenerateResponse out;
    out.set_request_id(id);
    out.set_text_delta(d.text);
    if (return_ids) out.mutable_token_ids()->Assign(d.token_ids.begin(), d.token_ids.end());
    if (logprobs) {
      for (const auto& lp : d.logprobs) *out.add_logprobs() = lp;
    }
    return writer->Write(out);
  });
  start.request.reset();
  if (r.outcome == Outcome::kCancelled) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
  }
  writer->Write(FinalResponse(id, r));
  return grpc::Status::OK;
}

grpc::Status GrpcFrontend::Abort(grpc::ServerContext* ctx, const v1::AbortRequest* request,
                                 v1::AbortResponse* response) {
  if (auto denied = CheckAuth(ctx)) return *denied;
  response->set_found(pipeline_.Abort(request->request_id()));
  return grpc::Status::OK;
}

grpc::Status GrpcFrontend::Models(grpc::ServerContext* ctx, const v1::ModelsRequest*,
                                  v1::ModelsResponse* response) {
  if (auto denied = CheckAuth(ctx)) return *denied;
  v1::ModelInfo* m = response->add_models();
  m->set_id(pipeline_.model().name);
  m->set_max_context_tokens(static_cast<uint32_t>(pipeline_.model().max_context));
  m->set_prefill_scheme(registry_.Scheme(WorkerRole::kPrefill));
  m->set_decode_scheme(registry_.Scheme(WorkerRole::kDecode));
  return grpc::Status::OK;
}

grpc::Status GrpcFrontend::Health(grpc::ServerContext*, const v1::HealthRequest*,
                                  v1::HealthResponse* response) {
  response->set_status(registry_.Ready() ? v1::SERVING_STATUS_SERVING
                                         : v1::SERVING_STATUS_NOT_SERVING);
  for (const WorkerStatus& w : registry_.Snapshot()) {
    v1::WorkerHealth* h = response->add_workers();
    h->set_address(w.address);
    h->set_role(std::string(WorkerRoleName(w.role)));
    h->set_status(w.live() ? v1::SERVING_STATUS_SERVING : v1::SERVING_STATUS_NOT_SERVING);
    h->set_detail(w.detail);
  }
  return grpc::Status::OK;
}

}  // namespace dq::router
