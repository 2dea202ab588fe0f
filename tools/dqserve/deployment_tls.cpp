#include "tools/dqserve/deployment_tls.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/worker_tls.h"

extern char** environ;

namespace dq::cli {
namespace {

namespace fs = std::filesystem;

// Runs argv with its output in `log`; OK when it exits 0.
absl::Status RunQuietly(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot run ", argv[0], " (", std::strerror(err),
                     "); install it (apt-get install openssl, as scripts/setup.sh does) or pass "
                     "--no-worker-tls"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::ifstream f(log);
  std::stringstream out;
  out << f.rdbuf();
  return absl::InternalError(
      absl::StrCat(argv[0], " failed making the deployment's certificate: ", out.str()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeploymentTls>> DeploymentTls::Create() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/dqserve-tls-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {  // mode 0700: only this user reads the key
    return absl::UnavailableError(
        absl::StrCat("cannot make a private directory for the deployment's certificate (", pattern,
                     "): ", std::strerror(errno)));
  }
  std::unique_ptr<DeploymentTls> tls(new DeploymentTls(pattern));
  const std::string name = kWorkerTlsDefaultName;
  DQ_RETURN_IF_ERROR(RunQuietly(
      {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-keyout", tls->dir_ + "/worker.key", "-out", tls->dir_ + "/worker.pem", "-days",
       "30", "-subj", "/CN=" + name, "-addext", "subjectAltName=DNS:" + name},
      tls->dir_ + "/openssl.log"));
  ::chmod((tls->dir_ + "/worker.key").c_str(), 0600);
  return tls;
}

DeploymentTls::~DeploymentTls() {
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

std::vector<std::string> DeploymentTls::worker_env() const {
  return {absl::StrCat(kWorkerTlsCertEnv, "=", dir_, "/worker.pem"),
          absl::StrCat(kWorkerTlsKeyEnv, "=", dir_, "/worker.key")};
}

std::vector<std::string> DeploymentTls::router_env() const {
  return {absl::StrCat(kWorkerTlsCaEnv, "=", dir_, "/worker.pem"),
          absl::StrCat(kWorkerTlsNameEnv, "=", kWorkerTlsDefaultName)};
}

}  // namespace dq::cli
