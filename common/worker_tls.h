// TLS between the router and the workers: the workers serve gRPC with a certificate, the router
// trusts the one CA (or pinned certificate) that signed it and checks the name it is for, so the
// worker key (common/worker_key.h) never crosses the network in clear and nobody in the middle
// can answer for a worker. Files travel in the environment like the key: `dqserve up` makes a
// fresh certificate per deployment; compose and Kubernetes mount them from a secret.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dq {

// Each file may instead come inline, as PEM text in the same name with _PEM appended
// (DQ_WORKER_TLS_CERT_PEM, ...): what a Kubernetes secret maps into the environment, optional
// like the worker key's (unset: plaintext). The inline form wins where both are set.
// Worker side: its certificate chain and private key (PEM files). Both or neither.
inline constexpr char kWorkerTlsCertEnv[] = "DQ_WORKER_TLS_CERT";
inline constexpr char kWorkerTlsKeyEnv[] = "DQ_WORKER_TLS_KEY";
// Router side: the CA certificate (PEM) the workers' certificates chain to, and the name they
// are issued for (the router checks it whatever address it dials).
inline constexpr char kWorkerTlsCaEnv[] = "DQ_WORKER_TLS_CA";
inline constexpr char kWorkerTlsNameEnv[] = "DQ_WORKER_TLS_NAME";
inline constexpr char kWorkerTlsDefaultName[] = "dqserve-worker";

struct WorkerTlsServer {
  std::string cert_pem;  // empty: plaintext gRPC
  std::string key_pem;
  bool enabled() const { return !cert_pem.empty(); }
};

struct WorkerTlsClient {
  std::string ca_pem;  // empty: plaintext gRPC
  std::string name = kWorkerTlsDefaultName;
  bool enabled() const { return !ca_pem.empty(); }
};

// The worker's files from DQ_WORKER_TLS_CERT / _KEY (neither set: disabled). InvalidArgument
// when only one is set or inline text holds no PEM block, NotFound naming a file that cannot be
// read or holds none.
absl::StatusOr<WorkerTlsServer> WorkerTlsServerFromEnv();
// The router's from DQ_WORKER_TLS_CA / _NAME (no CA: disabled), with the same errors.
absl::StatusOr<WorkerTlsClient> WorkerTlsClientFromEnv();

}  // namespace dq
