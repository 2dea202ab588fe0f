// A RequestPipeline over fake prefill and decode services behind one loopback gRPC server, for
// router tests: the WorkerRegistry holds both workers as live, as its probes would set it after
// a handshake of the Qwen3 test layout. The services, model, scheduler and metrics must outlive
// it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "dqserve/v1/worker.grpc.pb.h"
#include "router/request_pipeline.h"
#include "router/worker_registry.h"

namespace dq::router {

// What a worker of the test layout (2 layers, 2 KV heads of 64, bf16, blocks of 16) answers.
inline dqserve::v1::HandshakeResponse LoopbackHandshake(const std::string& role) {
  dqserve::v1::HandshakeResponse r;
  r.mutable_worker()->set_role(role);
  dqserve::v1::KvLayout* l = r.mutable_worker()->mutable_kv_layout();
  l->set_architecture("Qwen3ForCausalLM");
  l->set_num_layers(2);
  l->set_num_kv_heads(2);
  l->set_head_dim(64);
  l->set_kv_dtype("bf16");
  l->set_block_size(16);
  r.mutable_worker()->add_transports("tcp");
  r.set_kv_layout_compatible(true);
  return r;
}

class LoopbackPipeline {
 public:
  LoopbackPipeline(grpc::Service* prefill, grpc::Service* decode, const ServedModel& model,
                   Scheduler& scheduler, RouterMetrics& metrics) {
    using std::chrono::milliseconds;
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(prefill);
    b.RegisterService(decode);
    server_ = b.BuildAndStart();
    const std::string address = "127.0.0.1:" + std::to_string(port);
    WorkerRegistryOptions o;
    o.prefill_addresses = {address};
    o.decode_addresses = {address};
    registry_ = std::make_unique<WorkerRegistry>(o);
    for (WorkerRole role : {WorkerRole::kDecode, WorkerRole::kPrefill}) {
      registry_->ApplyHandshake(
          role, 0, LoopbackHandshake(role == WorkerRole::kDecode ? "decode" : "prefill"),
          registry_->reference_layout());
      dqserve::v1::WorkerHealthResponse h;
      h.set_status(dqserve::v1::SERVING_STATUS_SERVING);
      registry_->ApplyHealth(role, 0, h);
    }
    pipeline_ = std::make_unique<RequestPipeline>(
        PipelineOptions{milliseconds(10000), milliseconds(5000), milliseconds(1000)}, model,
        scheduler, *registry_, metrics);
  }
  ~LoopbackPipeline() {
    pipeline_.reset();  // before the server: its calls end first
    server_->Shutdown();
  }
  RequestPipeline& pipeline() { return *pipeline_; }
  WorkerRegistry& registry() { return *registry_; }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RequestPipeline> pipeline_;
};

}  // namespace dq::router
