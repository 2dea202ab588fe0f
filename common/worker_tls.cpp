#include "common/worker_tls.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace dq {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

absl::StatusOr<std::string> ReadPem(const char* env, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  if (f) ss << f.rdbuf();
  std::string pem = ss.str();
  if (!f || pem.find("-----BEGIN ") == std::string::npos) {
    return absl::NotFoundError(absl::StrCat(env, "=", path,
                                            ": cannot read a PEM file there; point it at the "
                                            "deployment's certificate files (docs/deploy.md)"));
  }
  return pem;
}

}  // namespace

absl::StatusOr<WorkerTlsServer> WorkerTlsServerFromEnv() {
  const std::string cert = Env(kWorkerTlsCertEnv);
  const std::string key = Env(kWorkerTlsKeyEnv);
  WorkerTlsServer tls;
  if (cert.empty() && key.empty()) return tls;
  if (cert.empty() || key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("set both ", kWorkerTlsCertEnv, " and ",
                                                   kWorkerTlsKeyEnv,
                                                   " (the worker's certificate and "
                                                   "its private key) or neither"));
  }
  auto cert_pem = ReadPem(kWorkerTlsCertEnv, cert);
  if (!cert_pem.ok()) return cert_pem.status();
  auto key_pem = ReadPem(kWorkerTlsKeyEnv, key);
  if (!key_pem.ok()) return key_pem.status();
  tls.cert_pem = std::move(*cert_pem);
  tls.key_pem = std::move(*key_pem);
  return tls;
}

absl::StatusOr<WorkerTlsClient> WorkerTlsClientFromEnv() {
  WorkerTlsClient tls;
  const std::string name = Env(kWorkerTlsNameEnv);
  if (!name.empty()) tls.name = name;
  const std::string ca = Env(kWorkerTlsCaEnv);
  if (ca.empty()) return tls;
  auto pem = ReadPem(kWorkerTlsCaEnv, ca);
  if (!pem.ok()) return pem.status();
  tls.ca_pem = std::move(*pem);
  return tls;
}

}  // namespace dq
