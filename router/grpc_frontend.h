// The public gRPC API (dqserve.v1.DqServe) over the same pipeline as the HTTP front end:
// Generate (prompt | chat | token ids, streamed), Abort (by request id), Models, Health; beside
// it grpc.health.v1.Health (SERVING while both roles have a live worker, as GET /health) and
// server reflection (proto/grpc_standard_services.h).
// Requests are validated by the OpenAI parser (see generation_input.h), so both front ends
// accept the same things; errors before streaming are gRPC statuses, errors after it a final
// response with FINISH_REASON_ERROR (or ABORT for a deadline) and `error` set.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "dqserve/v1/generate.grpc.pb.h"
#include "proto/grpc_standard_services.h"
#include "router/openai_request.h"
#include "router/request_pipeline.h"
#include "router/scheduler.h"
#include "router/worker_registry.h"

namespace dq::router {

struct GrpcFrontendOptions {
  std::string host = "127.0.0.1";
  int port = 0;                       // 0: off
  std::vector<std::string> api_keys;  // "authorization: Bearer <key>" metadata; Health exempt
};

class GrpcFrontend final : public dqserve::v1::DqServe::Service {
 public:
  GrpcFrontend(GrpcFrontendOptions options, RequestPipeline& pipeline, WorkerRegistry& registry);
  ~GrpcFrontend() override;

  // Starts serving on options.port; false (logged) when it cannot bind.
  bool Start();
  // Stops accepting calls and ends running ones (their requests should be aborted first).
  void Shutdown();
  int port() const { return bound_port_; }

  grpc::Status Generate(grpc::ServerContext* ctx, const dqserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<dqserve::v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* ctx, const dqserve::v1::AbortRequest* request,
                     dqserve::v1::AbortResponse* response) override;
  grpc::Status Models(grpc::ServerContext* ctx, const dqserve::v1::ModelsRequest* request,
                      dqserve::v1::ModelsResponse* response) override;
  grpc::Status Health(grpc::ServerContext* ctx, const dqserve::v1::HealthRequest* request,
                      dqserve::v1::HealthResponse* response) override;

 private:
  std::optional<grpc::Status> CheckAuth(const grpc::ServerContext* ctx) const;
  grpc::Status Reject(grpc::ServerContext* ctx, const ApiError& error,
                      const std::string& retry_after = "");

  const GrpcFrontendOptions options_;
  RequestPipeline& pipeline_;
  WorkerRegistry& registry_;
  ParseOptions parse_options_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<GrpcHealthPublisher> health_;  // after server_: destroyed before it
  int bound_port_ = 0;
};

// The final response's finish reason and error text for a result.
dqserve::v1::GenerateResponse FinalResponse(const std::string& request_id,
                                            const GenerationResult& result);

}  // namespace dq::router
