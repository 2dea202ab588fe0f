// The two-GPU transport tests' harness (nccl_transport_test.cpp, ucx_transport_test.cpp): the
// sender is the test process on cuda:0; the receiver a dq_kv_receiver process (found next to the
// test binary) on another GPU that registers zeroed device regions and checks their bytes itself.
#pragma once

#include <cuda_runtime.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/transport.h"
#include "tests/unit/kvtransfer/transport_scenarios.h"
#include "tests/unit/kvtransfer/two_process.h"

namespace dq::kvtransfer::testing {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

inline int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

inline std::string ReceiverBinary() {
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string();
  return dir.substr(0, dir.rfind('/') + 1) + "dq_kv_receiver";
}

// The receiver process: fork + exec (a fork of a CUDA process may not use CUDA itself).
class RemoteReceiver {
 public:
  static std::unique_ptr<RemoteReceiver> Start(const std::string& kind, int device,
                                               const std::vector<uint64_t>& sizes, uint32_t seed,
                                               int timeout_ms, std::string* error) {
    signal(SIGPIPE, SIG_IGN);  // a receiver that died must fail a check, not kill the test
    std::string size_list;
    for (uint64_t s : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(s);
    const std::string bin = ReceiverBinary();
    std::optional<CommandChild> child = SpawnWithCommandPipe(
        {bin, "--kind", kind, "--device", std::to_string(device), "--seed", std::to_string(seed),
         "--timeout-ms", std::to_string(timeout_ms), "--sizes", size_list});
    if (!child) {
      *error = "pipe2() failed";
      return nullptr;
    }
    auto r =
        std::unique_ptr<RemoteReceiver>(new RemoteReceiver(child->pid, child->to, child->from));
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

// The sender on cuda:0 with the plan's source bytes in device memory, and a receiver process of
// the same transport kind.
struct Pair {
  std::unique_ptr<RemoteReceiver> receiver;
  std::unique_ptr<Transport> sender;
  void* source = nullptr;
  RegionId source_id = 0;
  std::vector<RemoteRegionId> remotes;
  std::string error;

  Pair(const std::string& kind, const CopyPlan& plan, int receiver_device, int timeout_ms = 10000,
       uint32_t seed = 7) {
    receiver = RemoteReceiver::Start(kind, receiver_device, plan.sizes, seed, timeout_ms, &error);
    if (receiver == nullptr) return;
    if (cudaSetDevice(0) != cudaSuccess || cudaMalloc(&source, plan.source.size()) != cudaSuccess ||
        cudaMemcpy(source, plan.source.data(), plan.source.size(), cudaMemcpyHostToDevice) !=
            cudaSuccess) {
      error = "cannot put the source bytes on cuda:0";
      return;
    }
    TransportConfig config;
    config.kind = kind;
    config.cuda_device = 0;
    config.io_timeout_ms = timeout_ms;
    auto t = CreateTransport(config);
    if (!t.ok()) {
      error = t.status().ToString();
      return;
    }
    sender = std::move(*t);
    if (!sender->supports_device_memory()) {
      error = "the " + kind + " transport here cannot move device memory";
      return;
    }
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

#define DQ_NEED_GPUS(n)                                                       \
  if (DeviceCount() < (n)) {                                                  \
    GTEST_SKIP() << "needs " << (n) << " CUDA GPUs (sees " << DeviceCount()   \
                 << "): KV moves between two GPUs; run on the 2-GPU machine"; \
  }

inline void MoveAndVerify(Pair& p, const CopyPlan& plan, std::vector<size_t> which) {
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

}  // namespace dq::kvtransfer::testing
