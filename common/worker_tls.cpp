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

// The PEM text `env` names: inline in env + "_PEM", or in the file at env's path; "" when
// neither is set.
absl::StatusOr<std::string> PemFromEnv(const char* env) {
  const std::string inline_name = absl::StrCat(env, "_PEM");
  const std::string text = Env(inline_name.c_str());
  if (!text.empty()) {
    if (text.find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          inline_name, " holds no PEM block; give the file's text, BEGIN line and all"));
    }
    return text;
  }
  const std::string path = Env(env);
  if (path.empty()) return std::string();
  return ReadPem(env, path);
}

}  // namespace

absl::StatusOr<WorkerTlsServer> WorkerTlsServerFromEnv() {
  absl::StatusOr<std::string> cert = PemFromEnv(kWorkerTlsCertEnv);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = PemFromEnv(kWorkerTlsKeyEnv);
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("set both ", kWorkerTlsCertEnv, " and ", kWorkerTlsKeyEnv,
                     " (the worker's certificate and "
                     "its private key; or their _PEM forms) or neither"));
  }
  return WorkerTlsServer{std::move(*cert), std::move(*key)};
}

absl::StatusOr<WorkerTlsClient> WorkerTlsClientFromEnv() {
  WorkerTlsClient tls;
  const std::string name = Env(kWorkerTlsNameEnv);
  if (!name.empty()) tls.name = name;
  absl::StatusOr<std::string> ca = PemFromEnv(kWorkerTlsCaEnv);
  if (!ca.ok()) return ca.status();
  tls.ca_pem = std::move(*ca);
  return tls;
}

}  // namespace dq
