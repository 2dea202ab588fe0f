// A fresh TLS identity for one `dqserve up` deployment (common/worker_tls.h): a self-signed
// certificate for the name "dqserve-worker" that both workers serve with and the router pins as
// its only trust anchor, made by the openssl command in a private temporary directory that is
// removed when the deployment stops. Nothing outside this deployment can answer for its workers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace dq::cli {

class DeploymentTls {
 public:
  // Runs `openssl req` (P-256 key, 30 days). Errors: no openssl on PATH (say how to get it),
  // openssl failing (its output), no temporary directory.
  static absl::StatusOr<std::unique_ptr<DeploymentTls>> Create();
  ~DeploymentTls();
  DeploymentTls(const DeploymentTls&) = delete;
  DeploymentTls& operator=(const DeploymentTls&) = delete;

  // "KEY=value" entries: the workers' certificate and key, the router's trust anchor.
  std::vector<std::string> worker_env() const;
  std::vector<std::string> router_env() const;
  const std::string& dir() const { return dir_; }

 private:
  explicit DeploymentTls(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace dq::cli
