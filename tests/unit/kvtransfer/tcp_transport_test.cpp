// The tcp backend between two real processes (fork: the child is the receiver).
#include "kvtransfer/tcp_transport.h"

#include <gtest/gtest.h>

#include "kvtransfer/descriptor.h"
#include "tests/unit/kvtransfer/transport_scenarios.h"

namespace dq::kvtransfer::testing {
namespace {

TransportConfig TcpConfig(int io_timeout_ms = 3000) {
  TransportConfig c;
  c.kind = "tcp";
  c.io_timeout_ms = io_timeout_ms;
  return c;
}

const std::vector<uint64_t> kSizes = {64 << 10, (1 << 20) + 13, 8 << 20};

TEST(TcpTransportTest, MovesRegionsBetweenProcesses) {
  CopyPlan plan(kSizes);
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_EQ(s.sender->name(), "tcp");
  EXPECT_FALSE(s.sender->supports_device_memory());
  MoveAllAndVerify(s, plan);
  MoveAllAndVerify(s, plan);  // again, over the same (reused) connection
}

TEST(TcpTransportTest, StreamsA256MegabyteTransfer) {
  CopyPlan plan({256ull << 20});
  TwoProcessSetup s(TcpConfig(10000), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  auto start = std::chrono::steady_clock::now();
  auto id = s.sender->Post(s.source, s.remotes[0], plan.Copies(0));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForTransfer(*s.sender, *id, 60000).ok());
  double seconds = Seconds(start);
  EXPECT_EQ(s.receiver->Command("verify 0"), "ok");
  // Not asserted (shared machines vary): a figure for the log.
  std::printf("[ info ] 256 MiB over loopback tcp: %.3f s, %.2f GB/s\n", seconds,
              (256 << 20) / seconds / 1e9);
}

TEST(TcpTransportTest, OutOfBoundsPostFailsAndNothingIsSent) {
  CopyPlan plan(kSizes);
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  OutOfBoundsPostFails(s, plan);
}

TEST(TcpTransportTest, ReceiverRejectsWritesPastItsRegion) {
  // A descriptor that lies about the region's size gets past the sender's check; the receiver's
  // own check must refuse the write, keep its memory intact and keep the connection usable.
  CopyPlan plan(kSizes);
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  MoveAllAndVerify(s, plan);
  auto d = DecodeDescriptor(s.receiver->descriptors()[0], "tcp");
  ASSERT_TRUE(d.ok());
  d->bytes *= 4;
  auto forged = s.sender->Prepare(EncodeDescriptor(*d));
  ASSERT_TRUE(forged.ok()) << forged.status();
  std::vector<CopyOp> past_end = {{0, 0, 16}, {0, plan.sizes[0] + 100, 4096}};
  auto id = s.sender->Post(s.source, *forged, past_end);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Status refused = WaitForTransfer(*s.sender, *id, 10000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  EXPECT_NE(refused.message().find("receiver"), std::string::npos) << refused;
  // The connection survived (the refused op's bytes were drained, not left in the stream).
  MoveAllAndVerify(s, plan);
}

// A peer that can reach the KV port but holds no lease: it knows (or counts) region ids, not
// their keys. Its writes are refused before a byte lands, and the connection stays usable.
TEST(TcpTransportTest, AWriteWithoutTheRegionsKeyIsRefused) {
  CopyPlan plan(kSizes);
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  MoveAllAndVerify(s, plan);
  auto region0 = DecodeDescriptor(s.receiver->descriptors()[0], "tcp");
  auto region1 = DecodeDescriptor(s.receiver->descriptors()[1], "tcp");
  ASSERT_TRUE(region0.ok() && region1.ok());
  EXPECT_NE(region0->key, region1->key);
  RegionDescriptor guessed = *region0;
  guessed.key[0] ^= 1;  // one bit off
  RegionDescriptor counted = *region0;
  counted.region_id = region1->region_id;  // the next id, with the key this peer was given
  for (const RegionDescriptor& forged : {guessed, counted}) {
    auto remote = s.sender->Prepare(EncodeDescriptor(forged));
    ASSERT_TRUE(remote.ok()) << remote.status();
    // Bytes that differ from what the region holds, so a write that landed would show.
    const std::vector<CopyOp> overwrite = {{0, 4096, 4096}};
    auto id = s.sender->Post(s.source, *remote, overwrite);
    ASSERT_TRUE(id.ok()) << id.status();
    absl::Status refused = WaitForTransfer(*s.sender, *id, 10000);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
    EXPECT_NE(refused.message().find("another region's key"), std::string::npos) << refused;
  }
  EXPECT_EQ(s.receiver->Command("verify 0"), "ok");
  EXPECT_EQ(s.receiver->Command("verify 1"), "ok");
  MoveAllAndVerify(s, plan);
}

TEST(TcpTransportTest, ReleasedRegionFailsLateWritesAndReRegisterWorks) {
  CopyPlan plan(kSizes);
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  MoveAllAndVerify(s, plan);
  ASSERT_EQ(s.receiver->Command("release 0"), "ok");
  auto late = s.sender->Post(s.source, s.remotes[0], plan.Copies(0));
  ASSERT_TRUE(late.ok()) << late.status();
  absl::Status refused = WaitForTransfer(*s.sender, *late, 10000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound) << refused;
  // Re-register a region of the same size (index 3, a refill of region 0) and fill it.
  std::string descriptor = s.receiver->Command("register " + std::to_string(plan.sizes[0]));
  auto remote = s.sender->Prepare(descriptor);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto id = s.sender->Post(s.source, *remote, plan.Copies(0));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(WaitForTransfer(*s.sender, *id, 10000).ok());
  EXPECT_EQ(s.receiver->Command("verify 3"), "ok");
  EXPECT_EQ(s.receiver->Command("release 3"), "ok");
  EXPECT_TRUE(s.sender->ReleaseRemote(*remote).ok());
  EXPECT_EQ(s.sender->ReleaseRemote(*remote).code(), absl::StatusCode::kNotFound);
}

TEST(TcpTransportTest, PeerKilledMidTransferFailsWithinSeconds) {
  CopyPlan plan({64 << 10, 64 << 20});
  TwoProcessSetup s(TcpConfig(), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  PeerKilledMidTransfer(s, plan, /*must_fail_in_flight=*/true);
}

TEST(TcpTransportTest, StalledPeerTimesOut) {
  CopyPlan plan({64 << 20});
  TwoProcessSetup s(TcpConfig(/*io_timeout_ms=*/1000), plan);
  ASSERT_TRUE(s.ok()) << s.error;
  s.receiver->Stop();  // alive but silent: only the timeout can end this
  auto start = std::chrono::steady_clock::now();
  auto id = s.sender->Post(s.source, s.remotes[0], plan.Copies(0));
  ASSERT_TRUE(id.ok());
  std::optional<absl::Status> result = WaitEnded(*s.sender, *id, 8000);
  ASSERT_TRUE(result.has_value()) << "no timeout after 8 s";
  EXPECT_EQ(result->code(), absl::StatusCode::kDeadlineExceeded) << *result;
  EXPECT_LT(Seconds(start), 5.0);
  s.receiver->Kill();
}

TEST(TcpTransportTest, UnreachableReceiverFailsPrepare) {
  // Take a free port, then close it: nothing listens there.
  auto probe = CreateTransport(TcpConfig());
  ASSERT_TRUE(probe.ok());
  std::vector<std::byte> mem(64);
  auto handle = (*probe)->RegisterRegion(mem.data(), mem.size());
  ASSERT_TRUE(handle.ok());
  std::string descriptor = handle->descriptor;
  probe->reset();
  auto sender = CreateTransport(TcpConfig());
  ASSERT_TRUE(sender.ok());
  auto remote = (*sender)->Prepare(descriptor);
  ASSERT_FALSE(remote.ok());
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kUnavailable) << remote.status();
}

TEST(TcpTransportTest, WildcardBindNeedsAdvertiseAddress) {
  TransportConfig c = TcpConfig();
  c.bind_address = "0.0.0.0";
  auto t = CreateTransport(c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("advertise_address"), std::string::npos);
  c.advertise_address = "127.0.0.1";
  t = CreateTransport(c);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->address().rfind("127.0.0.1:", 0), 0u) << (*t)->address();
}

}  // namespace
}  // namespace dq::kvtransfer::testing
