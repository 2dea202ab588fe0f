// The credentials a worker's gRPC server listens with: TLS with the deployment's certificate
// when DQ_WORKER_TLS_CERT / _KEY are set (common/worker_tls.h), plaintext otherwise.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/statusor.h"

namespace dq::worker {

// Errors: those of WorkerTlsServerFromEnv (a half-set pair, an unreadable file).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerServerCredentials();

}  // namespace dq::worker
