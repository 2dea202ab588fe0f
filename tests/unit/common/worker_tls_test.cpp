// Where the router-worker TLS files come from (common/worker_tls.h): a path, or the PEM text
// inline (what a Kubernetes secret maps into the environment); both halves of a worker's pair or
// neither; clear errors for a file that is not there and text that is not PEM.
#include "common/worker_tls.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace dq {
namespace {

constexpr char kCert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kKey[] = "-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n";

class WorkerTlsEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name :
         {kWorkerTlsCertEnv, kWorkerTlsKeyEnv, kWorkerTlsCaEnv, kWorkerTlsNameEnv}) {
      unsetenv(name);
      unsetenv((std::string(name) + "_PEM").c_str());
    }
  }
  static std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + name;
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(WorkerTlsEnvTest, NothingSetIsPlaintext) {
  auto server = WorkerTlsServerFromEnv();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(server->enabled());
  auto client = WorkerTlsClientFromEnv();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_FALSE(client->enabled());
  EXPECT_EQ(client->name, "dqserve-worker");
}

TEST_F(WorkerTlsEnvTest, FilesAndInlineTextBothWork) {
  setenv(kWorkerTlsCertEnv, WriteFile("cert.pem", kCert).c_str(), 1);
  setenv((std::string(kWorkerTlsKeyEnv) + "_PEM").c_str(), kKey, 1);
  auto server = WorkerTlsServerFromEnv();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(server->cert_pem, kCert);
  EXPECT_EQ(server->key_pem, kKey);
  setenv((std::string(kWorkerTlsCaEnv) + "_PEM").c_str(), kCert, 1);
  setenv(kWorkerTlsNameEnv, "dq.internal", 1);
  auto client = WorkerTlsClientFromEnv();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(client->ca_pem, kCert);
  EXPECT_EQ(client->name, "dq.internal");
}

TEST_F(WorkerTlsEnvTest, HalfAPairAMissingFileAndNonPemTextAreRefused) {
  setenv((std::string(kWorkerTlsCertEnv) + "_PEM").c_str(), kCert, 1);
  auto half = WorkerTlsServerFromEnv();
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("set both"), std::string::npos) << half.status();

  setenv(kWorkerTlsKeyEnv, "/nonexistent/worker.key", 1);
  auto missing = WorkerTlsServerFromEnv();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/worker.key"), std::string::npos);

  setenv((std::string(kWorkerTlsCaEnv) + "_PEM").c_str(), "not a certificate", 1);
  auto text = WorkerTlsClientFromEnv();
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("DQ_WORKER_TLS_CA_PEM holds no PEM block"),
            std::string::npos)
      << text.status();
}

}  // namespace
}  // namespace dq
