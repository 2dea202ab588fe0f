// The ucx KV transport on device memory between two GPUs of this machine: the sender (this
// process) on cuda:0, the receiver a separate process (dq_kv_receiver --kind ucx) on cuda:1 that
// checks the bytes itself. Needs a UCX with its CUDA transports loaded (the libucx-cu13 wheel's,
// bench/pack_ucx_libs.sh prints the exports); with Debian's UCX every test fails saying so.
// Covered: 3 regions + a 256 MiB transfer with byte checks (and which UCX transports carried
// them: cuda_ipc expected inside a node), endpoint and rkey reuse, out-of-range posts, a new
// registration after a release, and a receiver killed mid-transfer (the sender fails within a
// bound instead of hanging). Needs 2 GPUs; skips otherwise.
#include "kvtransfer/ucx_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/transport.h"
#include "tests/gpu/kv_pair.h"

namespace dq::kvtransfer::testing {
namespace {

UcxTransport& Ucx(Pair& p) { return *static_cast<UcxTransport*>(p.sender.get()); }

TEST(UcxTransportGpuTest, MovesThreeRegionsAndA256MiBTransferOverCudaIpc) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB + 13, 8 * kMiB, 256 * kMiB});
  Pair p("ucx", plan, /*receiver_device=*/1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  std::printf("[ info ] %s\n", Ucx(p).runtime().c_str());
  MoveAndVerify(p, plan, {0, 1, 2});  // all three in flight at once
  const auto start = std::chrono::steady_clock::now();
  MoveAndVerify(p, plan, {3});
  std::printf("[ info ] 256 MiB (two copies, one transfer) incl. verify RPC: %.1f ms\n",
              1e3 * Seconds(start));
  MoveAndVerify(p, plan, {0, 1, 2, 3});  // the endpoint and rkeys are reused
  const std::string lanes = Ucx(p).DescribeEndpoints();
  std::printf("[ info ] endpoint:\n%s\n", lanes.c_str());
  // Inside a node device memory should go GPU to GPU (cuda_ipc), not staged by UCX through host.
  EXPECT_NE(lanes.find("cuda_ipc"), std::string::npos)
      << "UCX did not pick cuda_ipc for device memory; check UCX_TLS (it needs cuda_ipc, "
         "cuda_copy and a transport with peer-failure handling such as tcp)";
}

TEST(UcxTransportGpuTest, OutOfRangeFailsOnTheSenderAndNothingIsSent) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB});
  Pair p("ucx", plan, 1);
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
  // Region 0 is still all zeros: a check of the planned bytes must fail there...
  EXPECT_NE(p.receiver->Command("verify 0"), "ok");
  MoveAndVerify(p, plan, {0, 1});  // ...and the pair still works.
}

TEST(UcxTransportGpuTest, NewRegistrationAfterAReleaseWorks) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({256 * 1024, 2 * kMiB});
  Pair p("ucx", plan, 1);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {1});
  ASSERT_EQ(p.receiver->Command("release 0"), "ok");
  ASSERT_TRUE(p.sender->ReleaseRemote(p.remotes[0]).ok());
  const std::string descriptor = p.receiver->Command("register " + std::to_string(plan.sizes[0]));
  auto remote = p.sender->Prepare(descriptor);
  ASSERT_TRUE(remote.ok()) << remote.status();
  p.remotes.push_back(*remote);  // index 2: a refill of region 0
  auto id = p.sender->Post(p.source_id, *remote, plan.Copies(0));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(WaitForTransfer(*p.sender, *id, 30000).ok());
  EXPECT_EQ(p.receiver->Command("verify 2"), "ok");
  // The sender's own source: release and register again.
  ASSERT_TRUE(p.sender->ReleaseRegion(p.source_id).ok());
  auto again = p.sender->RegisterRegion(p.source, plan.source.size());
  ASSERT_TRUE(again.ok()) << again.status();
  p.source_id = again->id;
  MoveAndVerify(p, plan, {1});
}

// cuda_ipc puts are the sender's own copies into the receiver's memory, so a transfer already in
// flight may still complete after the kill; what must hold is that the sender learns of the dead
// peer within a bound (UCX's peer-failure handling, or the io timeout) and never hangs.
TEST(UcxTransportGpuTest, ReceiverKilledMidTransferFailsTheSenderInBoundedTime) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({kMiB, 256 * kMiB});
  Pair p("ucx", plan, 1, /*timeout_ms=*/3000);
  ASSERT_TRUE(p.error.empty()) << p.error;
  MoveAndVerify(p, plan, {0});  // the endpoint is up and has carried bytes
  const std::vector<CopyOp> whole = {{0, 0, plan.sizes[1]}};
  auto id = p.sender->Post(p.source_id, p.remotes[1], whole);
  ASSERT_TRUE(id.ok()) << id.status();
  const auto killed_at = std::chrono::steady_clock::now();
  p.receiver->Kill();
  std::optional<absl::Status> ended = WaitEnded(*p.sender, *id, 8000);
  ASSERT_TRUE(ended.has_value()) << "still pending 8 s after the receiver died";
  std::printf("[ info ] in-flight transfer ended %.2f s after the kill: %s\n", Seconds(killed_at),
              ended->ToString().c_str());
  // Keep posting as a prefill worker would: within the bound a post or a transfer must fail.
  absl::Status failure = ended->ok() ? absl::OkStatus() : *ended;
  while (failure.ok() && Seconds(killed_at) < 15.0) {
    auto next = p.sender->Post(p.source_id, p.remotes[0], plan.Copies(0));
    if (!next.ok()) {
      failure = next.status();
      break;
    }
    std::optional<absl::Status> late = WaitEnded(*p.sender, *next, 8000);
    ASSERT_TRUE(late.has_value()) << "a transfer to the dead receiver hung for 8 s";
    if (!late->ok()) failure = *late;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("[ info ] the sender failed %.2f s after the kill: %s\n", Seconds(killed_at),
              failure.ToString().c_str());
  EXPECT_FALSE(failure.ok()) << "transfers to a dead receiver kept succeeding for 15 s";
  EXPECT_LT(Seconds(killed_at), 15.0);
}

}  // namespace
}  // namespace dq::kvtransfer::testing
