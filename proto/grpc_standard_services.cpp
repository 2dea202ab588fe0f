#include "proto/grpc_standard_services.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <memory>
#include <utility>

namespace dq {

void AddStandardGrpcServices(grpc::ServerBuilder&) {
  // Both switches are process-wide in gRPC: the built-in health service's, and the reflection
  // plugin's (libgrpc++_reflection also registers it when loaded; registering is idempotent,
  // and calling it here keeps the library linked). Every server here wants both.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

GrpcHealthPublisher::GrpcHealthPublisher(grpc::Server& server, std::vector<std::string> services,
                                         std::function<bool()> serving,
                                         std::chrono::milliseconds period)
    : health_(server.GetHealthCheckService()),
      services_(std::move(services)),
      serving_(std::move(serving)) {
  if (health_ == nullptr) return;  // a server built without AddStandardGrpcServices
  Publish(!serving_ || serving_());
  if (serving_) thread_ = std::thread([this, period] { Loop(period); });
}

GrpcHealthPublisher::~GrpcHealthPublisher() { Shutdown(); }

void GrpcHealthPublisher::Publish(bool serving) {
  if (published_ == static_cast<int>(serving)) return;
  published_ = serving;
  health_->SetServingStatus("", serving);
  for (const std::string& s : services_) health_->SetServingStatus(s, serving);
}

void GrpcHealthPublisher::Loop(std::chrono::milliseconds period) {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    const bool serving = serving_();
    lock.lock();
    if (!stopping_) Publish(serving);
  }
}

void GrpcHealthPublisher::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    // Every service NOT_SERVING, and gRPC ignores later changes: Watch callers see the drain.
    if (health_ != nullptr) health_->Shutdown();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace dq
