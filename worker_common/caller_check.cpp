#include "worker_common/caller_check.h"

#include <string_view>

#include "common/worker_key.h"

namespace dq::worker {

grpc::Status CallerCheck::Check(const grpc::ServerContext& context) const {
  if (key_.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  const auto it = md.find("authorization");
  if (it != md.end() &&
      IsWorkerBearer(std::string_view(it->second.data(), it->second.size()), key_)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "this worker takes calls from its deployment's router only: the call lacks "
                      "the deployment's worker key (DQ_WORKER_KEY)");
}

}  // namespace dq::worker
