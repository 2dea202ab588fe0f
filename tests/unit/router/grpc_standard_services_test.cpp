// grpc.health.v1 through proto/grpc_standard_services.h on an in-process server: Check follows
// the polled `serving` both ways, answers for "" and the named service (another is NOT_FOUND),
// and stays NOT_SERVING after Shutdown whatever `serving` says. The health messages are
// encoded by hand (HealthCheckRequest{1: service}, HealthCheckResponse{1: status}): no
// generated code for grpc.health.v1 exists in this build.
#include "proto/grpc_standard_services.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "dqserve/v1/generate.grpc.pb.h"

namespace dq {
namespace {

constexpr int kServing = 1, kNotServing = 2;

// Check(service): the status enum, or -(gRPC code) when the call fails.
int Check(grpc::Channel& channel, const std::string& service) {
  std::string req;
  if (!service.empty()) {
    req = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  }
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::GenericStub stub(std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) return -static_cast<int>(s.error_code());
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -100;
  std::string bytes;
  for (const grpc::Slice& x : slices)
    bytes.append(reinterpret_cast<const char*>(x.begin()), x.size());
  // Default (UNKNOWN = 0) is sent as an empty message.
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : (bytes.empty() ? 0 : -101);
}

// A server with a service of ours registered (its name is what Check answers for besides "").
class GrpcHealthTest : public ::testing::Test {
 protected:
  GrpcHealthTest() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    AddStandardGrpcServices(b);
    server_ = b.BuildAndStart();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }
  ~GrpcHealthTest() override { server_->Shutdown(); }

  // Polls Check(service) until it answers `want` (the publisher polls every 20 ms here).
  bool Becomes(const std::string& service, int want) {
    for (int i = 0; i < 200; ++i) {
      if (Check(*channel_, service) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  dqserve::v1::DqServe::Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcHealthTest, FollowsServingBothWaysAndStaysDownAfterShutdown) {
  std::atomic<bool> serving{false};
  const std::string name = dqserve::v1::DqServe::service_full_name();
  GrpcHealthPublisher health(
      *server_, {name}, [&] { return serving.load(); }, std::chrono::milliseconds(20));
  EXPECT_EQ(Check(*channel_, ""), kNotServing);
  EXPECT_EQ(Check(*channel_, name), kNotServing);
  serving = true;
  EXPECT_TRUE(Becomes("", kServing));
  EXPECT_TRUE(Becomes(name, kServing));
  EXPECT_EQ(Check(*channel_, "no.such.Service"), -static_cast<int>(grpc::StatusCode::NOT_FOUND));
  serving = false;
  EXPECT_TRUE(Becomes("", kNotServing));
  EXPECT_TRUE(Becomes(name, kNotServing));
  serving = true;
  EXPECT_TRUE(Becomes(name, kServing));
  health.Shutdown();
  EXPECT_EQ(Check(*channel_, ""), kNotServing);  // at once, not at the next poll
  EXPECT_EQ(Check(*channel_, name), kNotServing);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(Check(*channel_, name), kNotServing);  // serving() still says true
  health.Shutdown();                               // idempotent
}

TEST_F(GrpcHealthTest, WithoutAPredicateItServesUntilShutdown) {
  const std::string name = dqserve::v1::DqServe::service_full_name();
  GrpcHealthPublisher health(*server_, {name}, nullptr);
  EXPECT_EQ(Check(*channel_, ""), kServing);
  EXPECT_EQ(Check(*channel_, name), kServing);
  health.Shutdown();
  EXPECT_EQ(Check(*channel_, name), kNotServing);
}

}  // namespace
}  // namespace dq
