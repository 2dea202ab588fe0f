// The worker side of the deployment's worker credential (common/worker_key.h): every RPC handler
// of both workers starts with Check, so that a caller without the key gets UNAUTHENTICATED before
// the worker reserves, computes or frees anything.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

namespace dq::worker {

class CallerCheck {
 public:
  // Empty `key`: every caller is accepted.
  explicit CallerCheck(std::string key) : key_(std::move(key)) {}

  grpc::Status Check(const grpc::ServerContext& context) const;
  bool enabled() const { return !key_.empty(); }

 private:
  std::string key_;
};

}  // namespace dq::worker
