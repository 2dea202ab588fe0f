// TLS between the router and the workers (common/worker_tls.h) against real processes: both
// workers serve with a self-signed certificate made here by openssl, as `dqserve up` makes one,
// and the router pins it. The deployment serves; a plaintext caller, and a TLS caller that
// trusts another certificate, cannot even reach a worker's Health.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "dqserve/v1/worker.grpc.pb.h"
#include "tests/integration/deployment.h"

namespace {

using namespace dq::integration;  // NOLINT: test-local helpers

// A self-signed certificate for "dqserve-worker" in a fresh directory (`openssl req`, as
// tools/dqserve/deployment_tls.cpp runs it); "" when openssl failed.
std::string MakeCertificate() {
  char dir[] = "/tmp/dq-tls-test-XXXXXX";
  if (mkdtemp(dir) == nullptr) return "";
  const std::string d = dir;
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + d +
      "/worker.key -out " + d +
      "/worker.pem -days 1 -subj /CN=dqserve-worker -addext "
      "subjectAltName=DNS:dqserve-worker >" +
      d + "/openssl.log 2>&1";
  return std::system(cmd.c_str()) == 0 ? d : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class WorkerTlsTest : public DeploymentSuite<WorkerTlsTest> {
 public:
  static DeploymentOptions Options() {
    dir_ = MakeCertificate();
    DeploymentOptions o{TinyModel(), "", {}};
    o.worker_key = "tls-test-key";
    o.worker_env = {{"DQ_WORKER_TLS_CERT", dir_ + "/worker.pem"},
                    {"DQ_WORKER_TLS_KEY", dir_ + "/worker.key"}};
    o.router_env = {{"DQ_WORKER_TLS_CA", dir_ + "/worker.pem"}};
    return o;
  }

 protected:
  // Health of the decode worker through `credentials` (the right key in every case).
  static grpc::Status DecodeHealth(std::shared_ptr<grpc::ChannelCredentials> credentials) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("dqserve-worker");
    auto stub = v1::DecodeWorker::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(deployment_->decode_port()), credentials, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ctx.AddMetadata("authorization", "Bearer tls-test-key");
    v1::WorkerHealthResponse health;
    return stub->Health(&ctx, v1::WorkerHealthRequest(), &health);
  }
  static grpc::SslCredentialsOptions Trusting(const std::string& pem) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = pem;
    return o;
  }

  inline static std::string dir_;
};

TEST_F(WorkerTlsTest, TheRouterCallsTheWorkersOverTlsAndServes) {
  ASSERT_FALSE(dir_.empty()) << "openssl could not make the test certificate";
  const Stream s = Generate(deployment_->stub(), PromptRequest("hello", 3));
  ASSERT_TRUE(WellFormed(s));
  EXPECT_GT(s.last().usage().completion_tokens(), 0u);
  // The same call a router makes, from here: TLS trusting the deployment's certificate.
  const grpc::Status s_ok =
      DecodeHealth(grpc::SslCredentials(Trusting(ReadFile(dir_ + "/worker.pem"))));
  EXPECT_TRUE(s_ok.ok()) << s_ok.error_message();
}

TEST_F(WorkerTlsTest, PlaintextAndUntrustedCallersCannotReachAWorker) {
  ASSERT_FALSE(dir_.empty()) << "openssl could not make the test certificate";
  const grpc::Status plain = DecodeHealth(grpc::InsecureChannelCredentials());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  const std::string other = MakeCertificate();  // same name, another key: an impostor's view
  ASSERT_FALSE(other.empty());
  const grpc::Status untrusted =
      DecodeHealth(grpc::SslCredentials(Trusting(ReadFile(other + "/worker.pem"))));
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusted.error_message();
}

}  // namespace
