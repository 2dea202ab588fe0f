// The nccl KV transport between two GPUs of this machine: the sender (this process) on cuda:0,
// the receiver a separate process (dq_kv_receiver --kind nccl) on cuda:1 that checks the bytes
// itself. Covered: 3 regions + a 256 MiB transfer with byte checks, communicator reuse,
// out-of-range posts (sender side) and a forged descriptor or region key (refused by the
// receiver, which drains the bytes and stays usable), release + re-register, a receiver killed
// mid-transfer and a stalled one (the sender fails within a bound), and two workers on one GPU
// refused with a clear error. Needs 2 GPUs (1 for the same-GPU test); skips otherwise.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/descriptor.h"
#include "kvtransfer/transport.h"
#include "tests/gpu/kv_pair.h"

namespace dq::kvtransfer::testing {
namespace {

TEST(NcclTransportGpuTest, MovesThreeRegionsAndA256MiBTransfer) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB + 13, 8 * kMiB, 256 * kMiB});
  Pair p("nccl", plan, /*receiver_device=*/1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {0, 1, 2});  // all three in flight at once
  const auto start = std::chrono::steady_clock::now();
  MoveAndVerify(p, plan, {3});
  const double s = Seconds(start);
  std::printf("[ info ] 256 MiB (two copies, one transfer) incl. verify RPC: %.1f ms\n", 1e3 * s);
  // The communicator is reused: a second round over the same pair.
  MoveAndVerify(p, plan, {0, 1, 2, 3});
}

TEST(NcclTransportGpuTest, OutOfRangeFailsOnTheSenderAndForgedRangesOnTheReceiver) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB, 4 * kMiB});
  Pair p("nccl", plan, 1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  const uint64_t n = plan.sizes[0];
  const CopyOp past_remote_end{0, n - 10, 20};
  EXPECT_EQ(p.sender->Post(p.source_id, p.remotes[0], {&past_remote_end, 1}).status().code(),
            absl::StatusCode::kOutOfRange);
  const CopyOp past_local_end{plan.source.size() - 1, 0, 2};
  EXPECT_EQ(p.sender->Post(p.source_id, p.remotes[0], {&past_local_end, 1}).status().code(),
            absl::StatusCode::kOutOfRange);
  const CopyOp wrapping{0, ~uint64_t{0} - 3, 8};
  EXPECT_EQ(p.sender->Post(p.source_id, p.remotes[0], {&wrapping, 1}).status().code(),
            absl::StatusCode::kOutOfRange);
  // A descriptor claiming a bigger region passes the sender's check; the receiver must refuse.
  auto d = DecodeDescriptor(p.receiver->descriptors()[0], "nccl");
  ASSERT_TRUE(d.ok());
  d->bytes *= 16;
  auto forged = p.sender->Prepare(EncodeDescriptor(*d));
  ASSERT_TRUE(forged.ok()) << forged.status();
  const CopyOp beyond{0, n, 2 * n};
  auto id = p.sender->Post(p.source_id, *forged, {&beyond, 1});
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Status refused = WaitForTransfer(*p.sender, *id, 30000);
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange) << refused;
  EXPECT_NE(refused.message().find("refused"), std::string::npos) << refused;
  // Nothing landed out of bounds (region 0 untouched so far) and the pair still works.
  MoveAndVerify(p, plan, {0, 1, 2});
}

// A peer without the region's key (a guessed one, or a counted region id) is refused by the
// receiver before any recv lands in the region; the pair stays usable.
TEST(NcclTransportGpuTest, AWriteWithoutTheRegionsKeyIsRefused) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB, 4 * kMiB});
  Pair p("nccl", plan, 1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  auto d0 = DecodeDescriptor(p.receiver->descriptors()[0], "nccl");
  auto d1 = DecodeDescriptor(p.receiver->descriptors()[1], "nccl");
  ASSERT_TRUE(d0.ok() && d1.ok());
  RegionDescriptor guessed = *d0;
  guessed.key[7] ^= 0x80;
  RegionDescriptor counted = *d0;
  counted.region_id = d1->region_id;
  for (const RegionDescriptor& forged : {guessed, counted}) {
    auto remote = p.sender->Prepare(EncodeDescriptor(forged));
    ASSERT_TRUE(remote.ok()) << remote.status();
    const CopyOp op{0, 0, 4096};
    auto id = p.sender->Post(p.source_id, *remote, {&op, 1});
    ASSERT_TRUE(id.ok()) << id.status();
    absl::Status refused = WaitForTransfer(*p.sender, *id, 30000);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << refused;
  }
  MoveAndVerify(p, plan, {0, 1, 2});
}

TEST(NcclTransportGpuTest, ReleasedRegionRefusesWritesAndReRegisterWorks) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({256 * 1024, kMiB, 2 * kMiB});
  Pair p("nccl", plan, 1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {1});
  ASSERT_EQ(p.receiver->Command("release 0"), "ok");
  auto id = p.sender->Post(p.source_id, p.remotes[0], plan.Copies(0));
  ASSERT_TRUE(id.ok()) << id.status();
  absl::Status s = WaitForTransfer(*p.sender, *id, 30000);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  const std::string descriptor = p.receiver->Command("register " + std::to_string(plan.sizes[0]));
  auto remote = p.sender->Prepare(descriptor);
  ASSERT_TRUE(remote.ok()) << remote.status();
  p.remotes.push_back(*remote);  // index 3: a refill of region 0
  auto again = p.sender->Post(p.source_id, *remote, plan.Copies(0));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(WaitForTransfer(*p.sender, *again, 30000).ok());
  EXPECT_EQ(p.receiver->Command("verify 3"), "ok");
  MoveAndVerify(p, plan, {1, 2});
}

TEST(NcclTransportGpuTest, ReceiverKilledMidTransferFailsTheSenderFast) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({kMiB, 256 * kMiB});
  Pair p("nccl", plan, 1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {0});  // the communicator is up and has carried bytes
  p.receiver->Stop();
  const std::vector<CopyOp> whole = {{0, 0, plan.sizes[1]}};
  auto id = p.sender->Post(p.source_id, p.remotes[1], whole);
  ASSERT_TRUE(id.ok()) << id.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto killed_at = std::chrono::steady_clock::now();
  p.receiver->Kill();
  std::optional<absl::Status> ended = WaitEnded(*p.sender, *id, 8000);
  ASSERT_TRUE(ended.has_value()) << "still pending 8 s after the receiver died";
  EXPECT_FALSE(ended->ok());
  std::printf("[ info ] in-flight transfer failed %.2f s after the kill: %s\n", Seconds(killed_at),
              ended->ToString().c_str());
  EXPECT_LT(Seconds(killed_at), 5.0);
  // Later posts fail too (at Post: nobody listens; or as a failed transfer), never hang.
  auto after = p.sender->Post(p.source_id, p.remotes[0], plan.Copies(0));
  if (after.ok()) {
    std::optional<absl::Status> late = WaitEnded(*p.sender, *after, 15000);
    ASSERT_TRUE(late.has_value());
    EXPECT_FALSE(late->ok());
  }
}

TEST(NcclTransportGpuTest, StalledReceiverFailsAfterTheIoTimeout) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({kMiB, 64 * kMiB});
  Pair p("nccl", plan, 1, /*timeout_ms=*/1500);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {0});
  p.receiver->Stop();
  const auto start = std::chrono::steady_clock::now();
  auto id = p.sender->Post(p.source_id, p.remotes[1], plan.Copies(1));
  ASSERT_TRUE(id.ok()) << id.status();
  std::optional<absl::Status> ended = WaitEnded(*p.sender, *id, 10000);
  ASSERT_TRUE(ended.has_value()) << "still pending 10 s into a 1.5 s io timeout";
  EXPECT_EQ(ended->code(), absl::StatusCode::kDeadlineExceeded) << *ended;
  std::printf("[ info ] stalled receiver: transfer failed after %.2f s: %s\n", Seconds(start),
              ended->ToString().c_str());
  EXPECT_LT(Seconds(start), 6.0);
  // The source is free again at once (the aborted sends let go of it).
  const auto release_start = std::chrono::steady_clock::now();
  EXPECT_TRUE(p.sender->ReleaseRegion(p.source_id).ok());
  p.source_id = 0;
  EXPECT_LT(Seconds(release_start), 1.0);
  p.receiver->Kill();
}

TEST(NcclTransportGpuTest, TwoWorkersOnOneGpuAreRefusedClearly) {
  DQ_NEED_GPUS(1);
  CopyPlan plan({64 * 1024});
  Pair p("nccl", plan, /*receiver_device=*/0);
  ASSERT_FALSE(p.error.empty()) << "a pair on one GPU was accepted";
  EXPECT_NE(p.error.find("both use the GPU"), std::string::npos) << p.error;
}

}  // namespace
}  // namespace dq::kvtransfer::testing
