// One request's way through the deployment, shared by the HTTP and gRPC front ends:
//   Start: admission (Scheduler) -> pick decode + prefill workers -> DecodeWorker.Reserve
//          -> PrefillWorker.Prefill (on failure the lease is released at once)
//   Run:   DecodeWorker.Decode, streamed through an OutputAssembler (detokenize, stop strings,
//          logprob strings) into the front end's callback.
// Start's errors carry the HTTP status the client should see, so a front end can still answer
// with a proper status line; Run's happen after streaming began and come back in the result.
//
// Never hangs: every worker call has the request's deadline (the client's, capped by
// --request-timeout-ms); the scheduler slot, worker load counts and a lease not yet committed
// are released by destructors. Cancelling (client gone, Abort, a worker declared dead, a stop
// string) cancels the gRPC call in flight, and workers free a request's KV blocks on cancel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dqserve/v1/worker.grpc.pb.h"
#include "router/api_error.h"
#include "router/api_types.h"
#include "router/decode_lease.h"
#include "router/openai_response.h"
#include "router/output_assembler.h"
#include "router/prefix_affinity.h"
#include "router/router_metrics.h"
#include "router/scheduler.h"
#include "router/served_model.h"
#include "router/worker_registry.h"

namespace dq::router {

struct GenerationInput {
  std::string request_id;  // unique among live requests (Abort's handle)
  std::vector<int32_t> prompt_ids;
  SamplingOptions sampling;  // validated by the front end
  int max_tokens = 16;       // resolved against the context
  bool logprobs = false;
  int top_logprobs = 0;
  bool prompt_logprobs = false;  // echo + logprobs: one per prompt token from the second on
  // Special tokens kept in the decoded text: the tool-call markers when the request has tools.
  std::vector<int32_t> keep_special_ids;
  std::optional<SchedulerClock::time_point> deadline;  // the client's; the router's cap applies
};

struct GenerationResult {
  Outcome outcome = Outcome::kStop;
  FinishReason finish_reason = FinishReason::kStop;  // outcome stop / length / abort
  std::optional<ApiError> error;                     // outcome error / timeout / cancelled
  std::string matched_stop;                          // the stop string that ended it, if one did
  Usage usage;
  double ttft_seconds = 0;
  double tpot_seconds = 0;
};

struct PipelineOptions {
  std::chrono::milliseconds request_timeout{600000};
  std::chrono::milliseconds queue_timeout{30000};
  // Release calls for leases that will not be committed: short, the request is over already.
  std::chrono::milliseconds release_timeout{1000};
};

struct RequestControl;  // cancel path of one live request (request_pipeline.cpp)
class RequestPipeline;

// A prefilled request whose decode has not run yet. Destroying it without Run releases the
// lease; destroying it at all frees the scheduler slot.
class ActiveRequest {
 public:
  ~ActiveRequest();
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;

  const std::string& id() const;
  const std::vector<int32_t>& prompt_ids() const { return input_.prompt_ids; }
  // With prompt_logprobs: one per prompt token from the second on, token strings filled in.
  const std::vector<dqserve::v1::PositionLogprobs>& prompt_logprobs() const {
    return prompt_logprobs_;
  }

  // Called with each non-empty step; returns false when the client is gone.
  using DeltaCallback = std::function<bool(const Delta&)>;
  // Streams the decode phase into `on_delta` and says how it ended. Call once.
  GenerationResult Run(const DeltaCallback& on_delta);

 private:
  friend class RequestPipeline;
  struct StreamState;
  ActiveRequest(RequestPipeline* pipeline, GenerationInput input);

  // Feeds the commit's first token; true when the request ends on it (it then never decodes).
  bool FeedFirstToken(const DeltaCallback& on_delta, OutputAssembler& out, StreamState& st);
  // Streams the Decode call into `on_delta` until the request ends; the call's status.
  grpc::Status StreamDecode(const DeltaCallback& on_delta, OutputAssembler& out, StreamState& st);
  bool ConsumeResponse(const dqserve::v1::DecodeResponse& response, OutputAssembler& out,
                       StreamState& st, Delta* delta);
  // Feeds one generated token; true when the request ends on it (stop string, max_tokens).
  bool FeedToken(int32_t token, const dqserve::v1::PositionLogprobs* logprobs, OutputAssembler& out,
                 StreamState& st, Delta* delta);
  GenerationResult Conclude(StreamState& st, const grpc::Status& status, OutputAssembler& out);
  // The stream's tail, usage and metrics.
  GenerationResult Finalize(GenerationResult result, const StreamState& st, OutputAssembler& out,
                            const DeltaCallback& on_delta);

  RequestPipeline* pipeline_;
  GenerationInput input_;
  std::shared_ptr<RequestControl> control_;
  std::optional<Ticket> ticket_;  // admitted: held until the request ends
  bool admitted_ = false;
  SchedulerClock::time_point deadline_;
  SchedulerClock::time_point created_at_ = SchedulerClock::now();  // dq_e2e_request_latency
  SchedulerClock::time_point admitted_at_;
  std::optional<WorkerHandle> decode_;
  dqserve::v1::SamplingParams sampling_;
  DecodeLease lease_;  // after decode_: released before the handle goes
  dqserve::v1::KvCommit commit_;
  int cached_tokens_ = 0;  // prompt tokens the prefill worker took from its prefix cache
  std::vector<dqserve::v1::PositionLogprobs> prompt_logprobs_;
};

struct StartResult {
  std::unique_ptr<ActiveRequest> request;  // set on success
  ApiError error;
  std::string retry_after;  // with a 429
  bool ok() const { return request != nullptr; }
};

class RequestPipeline {
 public:
  RequestPipeline(PipelineOptions options, const ServedModel& model, Scheduler& scheduler,
                  WorkerRegistry& registry, RouterMetrics& metrics);

  // Admission and prefill. A failure is already counted in metrics.
  StartResult Start(GenerationInput input);
  // Cancels a live request (queued, prefilling or decoding); false when none has that id.
  bool Abort(const std::string& request_id);
  // Cancels every live request (shutdown).
  void AbortAll(const std::string& reason);
  // Refuses new requests (503) and aborts the live ones: the router is shutting down.
  void Close();
  // A worker was declared dead: fail its requests now rather than when their calls time out.
  void FailRequestsOn(WorkerRole role, const std::string& address, const std::string& reason);

  const ServedModel& model() const { return model_; }
  RouterMetrics& metrics() { return metrics_; }

 private:
  friend class ActiveRequest;

  std::optional<ApiError> Register(const std::shared_ptr<RequestControl>& control);
  void Unregister(const std::string& id);
  std::optional<StartResult> Admit(ActiveRequest& r);
  std::optional<ApiError> Reserve(ActiveRequest& r, const WorkerHandle& prefill);
  // The decode worker for `prompt`: the one holding its longest remembered prefix (a decode
  // worker with a prefix cache, within the load slack), else the least loaded.
  ApiResult<WorkerHandle> PickDecode(const std::vector<int32_t>& prompt);
  std::optional<ApiError> Prefill(ActiveRequest& r, const WorkerHandle& prefill);
  StartResult Fail(Outcome outcome, ApiError error);

  const PipelineOptions options_;
  const ServedModel& model_;
  Scheduler& scheduler_;
  WorkerRegistry& registry_;
  RouterMetrics& metrics_;
  PrefixAffinity affinity_;

  std::mutex mu_;
  bool closing_ = false;
  std::unordered_map<std::string, std::shared_ptr<RequestControl>> live_;
};

}  // namespace dq::router
