// The standard gRPC services every dqserve gRPC server carries beside its own:
// grpc.health.v1.Health (gRPC's built-in implementation, Check and Watch) and server reflection
// (grpc.reflection.v1alpha), so grpc_health_probe, Kubernetes' gRPC probes and grpcurl work.
// Both are exempt from the API and worker keys (docs/serving.md says why: a probe sends no
// metadata; neither exposes more than serving/not serving and the public .proto files).
//
// Health is SERVING while `serving()` is true and NOT_SERVING otherwise, for the whole server
// ("") and for each of its named services; from Shutdown() on it is NOT_SERVING for good (a
// draining server). `serving` is polled, so it may read any state the server keeps; without one
// the server is SERVING until Shutdown.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dq {

// Call before BuildAndStart: turns on reflection and gRPC's health service (process-wide in
// gRPC, so every server the process builds afterwards has them).
void AddStandardGrpcServices(grpc::ServerBuilder& builder);

class GrpcHealthPublisher {
 public:
  // `server` was built by a builder given to AddStandardGrpcServices and outlives this.
  GrpcHealthPublisher(grpc::Server& server, std::vector<std::string> services,
                      std::function<bool()> serving,
                      std::chrono::milliseconds period = std::chrono::milliseconds(250));
  ~GrpcHealthPublisher();
  GrpcHealthPublisher(const GrpcHealthPublisher&) = delete;
  GrpcHealthPublisher& operator=(const GrpcHealthPublisher&) = delete;

  // NOT_SERVING from now on; call before the server's own Shutdown so its grace period is seen
  // as draining. Idempotent.
  void Shutdown();

 private:
  void Publish(bool serving);
  void Loop(std::chrono::milliseconds period);

  grpc::HealthCheckServiceInterface* health_;
  const std::vector<std::string> services_;
  const std::function<bool()> serving_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int published_ = -1;  // -1: nothing yet; else the last published bool
  std::thread thread_;
};

}  // namespace dq
