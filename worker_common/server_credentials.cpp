#include "worker_common/server_credentials.h"

#include "common/logging.h"
#include "common/worker_tls.h"

namespace dq::worker {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerServerCredentials() {
  absl::StatusOr<WorkerTlsServer> tls = WorkerTlsServerFromEnv();
  if (!tls.ok()) return tls.status();
  if (!tls->enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o;
  o.pem_key_cert_pairs.push_back({tls->key_pem, tls->cert_pem});
  spdlog::info("gRPC: serving over TLS with the certificate in {}", kWorkerTlsCertEnv);
  return grpc::SslServerCredentials(o);
}

}  // namespace dq::worker
