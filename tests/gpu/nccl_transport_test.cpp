// The nccl KV transport between two GPUs of this machine: the sender (this process) on cuda:0,
// the receiver a separate process (dq_nccl_receiver) on cuda:1 that checks the bytes itself.
// Covered: 3 regions + a 256 MiB transfer with byte checks, communicator reuse, out-of-range
// posts (sender side) and a forged descriptor (refused by the receiver, which drains the bytes
// and stays usable), release + re-register, a receiver killed mid-transfer and a stalled one (the
// sender fails within a bound), and two workers on one GPU refused with a clear error.
// Needs 2 GPUs (1 for the same-GPU test); skips otherwise.
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
#include "tests/unit/kvtransfer/transport_scenarios.h"

namespace dq::kvtransfer::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::string ReceiverBinary() {
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string();
  return dir.substr(0, dir.rfind('/') + 1) + "dq_nccl_receiver";
}

// The receiver process: fork + exec (a fork of a CUDA process may not use CUDA itself).
class RemoteReceiver {
 public:
  static std::unique_ptr<RemoteReceiver> Start(int device, const std::vector<uint64_t>& sizes,
                                               uint32_t seed, int timeout_ms, std::string* error) {
    signal(SIGPIPE, SIG_IGN);  // a receiver that died must fail a check, not kill the test
    int to_child[2], from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      *error = "pipe2() failed";
      return nullptr;
    }
    std::string size_list;
    for (uint64_t s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
    const std::string bin = ReceiverBinary();
    std::vector<std::string> args = {bin,
                                     "--in-fd",
                                     "3",
                                     "--out-fd",
                                     "4",
                                     "--device",
                                     std::to_string(device),
                                     "--seed",
                                     std::to_string(seed),
                                     "--timeout-ms",
                                     std::to_string(timeout_ms),
                                     "--sizes",
                                     size_list};
    pid_t pid = fork();
    if (pid == 0) {
      dup2(to_child[0], 3);  // dup2 clears O_CLOEXEC on the copies
      dup2(from_child[1], 4);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    auto r = std::unique_ptr<RemoteReceiver>(new RemoteReceiver(pid, to_child[1], from_child[0]));
    std::optional<std::string> hello = ReadMessage(r->from_, 60000);
    if (!hello || hello->rfind("error:", 0) == 0) {
      *error = hello ? *hello : "receiver " + bin + " did not start";
      return nullptr;
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::optional<std::string> d = ReadMessage(r->from_, 60000);
      if (!d || d->rfind("error:", 0) == 0) {
        *error = d ? *d : "receiver did not send its descriptors";
        return nullptr;
      }
      r->descriptors_.push_back(*d);
    }
    return r;
  }

  ~RemoteReceiver() {
    if (pid_ > 0) {
      Command("quit");
      for (int i = 0; i < 1000 && waitpid(pid_, nullptr, WNOHANG) != pid_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (i == 999) Kill();
      }
    }
    close(to_);
    close(from_);
  }

  const std::vector<std::string>& descriptors() const { return descriptors_; }
  std::string Command(const std::string& c, int timeout_ms = 60000) {
    if (!WriteMessage(to_, c)) return "";
    return ReadMessage(from_, timeout_ms).value_or("");
  }
  void Stop() { kill(pid_, SIGSTOP); }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  RemoteReceiver(pid_t pid, int to, int from) : pid_(pid), to_(to), from_(from) {}
  pid_t pid_;
  int to_, from_;
  std::vector<std::string> descriptors_;
};

// The sender on cuda:0 with the plan's source bytes in device memory, and a receiver.
struct Pair {
  std::unique_ptr<RemoteReceiver> receiver;
  std::unique_ptr<Transport> sender;
  void* source = nullptr;
  RegionId source_id = 0;
  std::vector<RemoteRegionId> remotes;
  std::string error;

  Pair(const CopyPlan& plan, int receiver_device, int timeout_ms = 10000, uint32_t seed = 7) {
    receiver = RemoteReceiver::Start(receiver_device, plan.sizes, seed, timeout_ms, &error);
    if (receiver == nullptr) return;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&source, plan.source.size()) != cudaSuccess ||
        cudaMemcpy(source, plan.source.data(), plan.source.size(), cudaMemcpyHostToDevice) !=
            cudaSuccess) {
      error = "cannot put the source bytes on cuda:0";
      return;
    }
    TransportConfig config;
    config.kind = "nccl";
    config.cuda_device = 0;
    config.io_timeout_ms = timeout_ms;
    auto t = CreateTransport(config);
    if (!t.ok()) {
      error = t.status().ToString();
      return;
    }
    sender = std::move(*t);
    auto handle = sender->RegisterRegion(source, plan.source.size());
    if (!handle.ok()) {
      error = handle.status().ToString();
      return;
    }
    source_id = handle->id;
    for (const std::string& d : receiver->descriptors()) {
      auto remote = sender->Prepare(d);
      if (!remote.ok()) {
        error = remote.status().ToString();
        return;
      }
      remotes.push_back(*remote);
    }
  }
  ~Pair() {
    if (sender != nullptr && source_id != 0) {
      EXPECT_TRUE(sender->ReleaseRegion(source_id).ok());
    }
    sender.reset();
    receiver.reset();
    if (source != nullptr) cudaFree(source);
  }
};

#define DQ_NEED_GPUS(n)                                                            \
  if (DeviceCount() < (n)) {                                                       \
    GTEST_SKIP() << "needs " << (n) << " CUDA GPUs (sees " << DeviceCount()        \
                 << "): NCCL moves KV between two GPUs; run on the 2-GPU machine"; \
  }

void MoveAndVerify(Pair& p, const CopyPlan& plan, std::vector<size_t> which) {
  std::vector<TransferId> ids;
  for (size_t i : which) {
    auto id = p.sender->Post(p.source_id, p.remotes[i], plan.Copies(i));
    ASSERT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  for (TransferId id : ids) {
    absl::Status s = WaitForTransfer(*p.sender, id, 60000);
    ASSERT_TRUE(s.ok()) << s;
  }
  for (size_t i : which) EXPECT_EQ(p.receiver->Command("verify " + std::to_string(i)), "ok");
}

TEST(NcclTransportGpuTest, MovesThreeRegionsAndA256MiBTransfer) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({64 * 1024, kMiB + 13, 8 * kMiB, 256 * kMiB});
  Pair p(plan, /*receiver_device=*/1);
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
  Pair p(plan, 1);
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

TEST(NcclTransportGpuTest, ReleasedRegionRefusesWritesAndReRegisterWorks) {
  DQ_NEED_GPUS(2);
  CopyPlan plan({256 * 1024, kMiB, 2 * kMiB});
  Pair p(plan, 1);
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
  Pair p(plan, 1);
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
  Pair p(plan, 1, /*timeout_ms=*/1500);
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
  Pair p(plan, /*receiver_device=*/0);
  ASSERT_FALSE(p.error.empty()) << "a pair on one GPU was accepted";
  EXPECT_NE(p.error.find("both use the GPU"), std::string::npos) << p.error;
}

}  // namespace
}  // namespace dq::kvtransfer::testing
