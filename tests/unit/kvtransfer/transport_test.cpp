// The factory, the descriptor envelope, and the local backend (plus tcp inside one process,
// which the sanitizer pass can see end to end).
#include "kvtransfer/transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "kvtransfer/descriptor.h"
#include "tests/unit/kvtransfer/transport_scenarios.h"

namespace dq::kvtransfer::testing {
namespace {

TEST(TransportFactoryTest, UnknownKindListsTheKinds) {
  TransportConfig c;
  c.kind = "rdma";
  auto t = CreateTransport(c);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("'rdma'"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("local, tcp, ucx, nccl"), std::string::npos) << t.status();
}

TEST(TransportFactoryTest, RejectsNonPositiveTimeout) {
  TransportConfig c;
  c.io_timeout_ms = 0;
  EXPECT_EQ(CreateTransport(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DescriptorTest, RoundTripsAndRejectsForeignOrBrokenBytes) {
  RegionDescriptor d{"tcp", 42, 1 << 20, std::string("127.0.0.1:5\0x", 13)};
  std::string encoded = EncodeDescriptor(d);
  auto back = DecodeDescriptor(encoded, "tcp");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->region_id, 42u);
  EXPECT_EQ(back->bytes, 1u << 20);
  EXPECT_EQ(back->payload, d.payload);
  EXPECT_EQ(back->key, RegionKey{});
  d.key[3] = 0xab;
  d.key[15] = 0x01;
  auto keyed = DecodeDescriptor(EncodeDescriptor(d), "tcp");
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(keyed->key, d.key);
  auto other = DecodeDescriptor(encoded, "ucx");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other.status().message().find("'tcp' transport"), std::string::npos);
  EXPECT_FALSE(DecodeDescriptor(encoded.substr(0, encoded.size() - 1), "tcp").ok());
  EXPECT_FALSE(DecodeDescriptor(encoded + "x", "tcp").ok());
  EXPECT_FALSE(DecodeDescriptor("hello", "tcp").ok());
}

// Sender and receiver in this process, each with its own transport of `kind`.
struct InProcess {
  std::unique_ptr<Transport> sender, receiver;
  std::vector<std::vector<std::byte>> regions;
  std::vector<RegionHandle> handles;
  RegionId source = 0;
  std::vector<RemoteRegionId> remotes;

  InProcess(const std::string& kind, CopyPlan& plan) {
    TransportConfig c;
    c.kind = kind;
    sender = *CreateTransport(c);
    receiver = *CreateTransport(c);
    source = sender->RegisterRegion(plan.source.data(), plan.source.size())->id;
    for (uint64_t bytes : plan.sizes) {
      regions.emplace_back(bytes, std::byte{0});
      handles.push_back(*receiver->RegisterRegion(regions.back().data(), bytes));
      remotes.push_back(*sender->Prepare(handles.back().descriptor));
    }
  }
  void MoveAndCheck(const CopyPlan& plan) {
    std::vector<TransferId> ids;
    for (size_t i = 0; i < plan.sizes.size(); ++i) {
      auto id = sender->Post(source, remotes[i], plan.Copies(i));
      ASSERT_TRUE(id.ok()) << id.status();
      ids.push_back(*id);
    }
    for (TransferId id : ids) ASSERT_TRUE(WaitForTransfer(*sender, id, 30000).ok());
    for (size_t i = 0; i < plan.sizes.size(); ++i) {
      std::vector<std::byte> want(plan.sizes[i]);
      plan.Expected(static_cast<int>(i), want);
      EXPECT_TRUE(want == regions[i]) << "region " << i;
    }
  }
};

class InProcessTransportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InProcessTransportTest, MovesRegions) {
  CopyPlan plan({64 << 10, (1 << 20) + 13, 8 << 20});
  InProcess p(GetParam(), plan);
  p.MoveAndCheck(plan);
}

TEST_P(InProcessTransportTest, OutOfBoundsFailsBeforeAnyByteMoves) {
  CopyPlan plan({4096});
  InProcess p(GetParam(), plan);
  std::vector<CopyOp> ops = {{0, 0, 16}, {0, 4090, 16}};  // the second runs past the end
  auto id = p.sender->Post(p.source, p.remotes[0], ops);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(id.status().message().find("does not fit"), std::string::npos) << id.status();
  EXPECT_TRUE(std::all_of(p.regions[0].begin(), p.regions[0].end(),
                          [](std::byte b) { return b == std::byte{0}; }));
}

TEST_P(InProcessTransportTest, ReleasedRegionRefusesWritesAndReRegisterWorks) {
  CopyPlan plan({64 << 10});
  InProcess p(GetParam(), plan);
  ASSERT_TRUE(p.receiver->ReleaseRegion(p.handles[0].id).ok());
  EXPECT_EQ(p.receiver->ReleaseRegion(p.handles[0].id).code(), absl::StatusCode::kNotFound);
  auto id = p.sender->Post(p.source, p.remotes[0], plan.Copies(0));
  absl::Status late = id.ok() ? WaitForTransfer(*p.sender, *id, 10000) : id.status();
  EXPECT_EQ(late.code(), absl::StatusCode::kNotFound) << late;
  // Polling a finished transfer again says it is unknown.
  if (id.ok()) {
    EXPECT_EQ(p.sender->Poll(*id).error.code(), absl::StatusCode::kNotFound);
  }
  // A new registration of the same memory gets a new id and works.
  auto handle = p.receiver->RegisterRegion(p.regions[0].data(), p.regions[0].size());
  ASSERT_TRUE(handle.ok());
  EXPECT_NE(handle->id, p.handles[0].id);
  p.remotes[0] = *p.sender->Prepare(handle->descriptor);
  p.MoveAndCheck(plan);
}

INSTANTIATE_TEST_SUITE_P(Kinds, InProcessTransportTest, ::testing::Values("local", "tcp"));

TransportConfig LocalConfig() {
  TransportConfig c;
  c.kind = "local";
  return c;
}

TEST(LocalTransportTest, RefusesDescriptorsFromAnotherProcess) {
  auto t = CreateTransport(LocalConfig());
  ASSERT_TRUE(t.ok());
  ByteWriter pid;
  pid.U64(static_cast<uint64_t>(getpid()) + 1);
  auto remote = (*t)->Prepare(EncodeDescriptor({"local", 1, 64, pid.Take()}));
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("tcp or ucx"), std::string::npos) << remote.status();
}

TEST(LocalTransportTest, RejectsEmptyRegionsAndEmptyPosts) {
  auto t = CreateTransport(LocalConfig());
  ASSERT_TRUE(t.ok());
  std::vector<std::byte> mem(16);
  EXPECT_EQ((*t)->RegisterRegion(mem.data(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->RegisterRegion(nullptr, 16).status().code(), absl::StatusCode::kInvalidArgument);
  auto handle = (*t)->RegisterRegion(mem.data(), mem.size());
  ASSERT_TRUE(handle.ok());
  auto remote = (*t)->Prepare(handle->descriptor);
  ASSERT_TRUE(remote.ok());
  EXPECT_EQ((*t)->Post(handle->id, *remote, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dq::kvtransfer::testing
