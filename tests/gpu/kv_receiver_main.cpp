// dq_kv_receiver: the receiving side of the two-GPU transport tests (tests/gpu/nccl_transport_test
// .cpp, ucx_transport_test.cpp), a process of its own on its own GPU (NCCL refuses two ranks of
// one communicator on one GPU, and a forked child of a process that already used CUDA cannot use
// it). It registers zeroed device regions with a transport of --kind (nccl, ucx), sends their
// descriptors, and answers commands over two pipes (length-prefixed messages,
// tests/unit/kvtransfer/two_process.h):
//   "verify <i>" -> "ok" or where region i differs from what CopyPlan(sizes, seed) says it holds
//   "release <i>" -> "ok" or the error;  "register <bytes>" -> a new region's descriptor;  "quit".
// Usage: dq_kv_receiver --kind K --in-fd N --out-fd N --device D --seed S --timeout-ms T
//                       --sizes a,b,c
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvtransfer/transport.h"
#include "tests/unit/kvtransfer/transport_scenarios.h"

namespace dq::kvtransfer::testing {
namespace {

struct Args {
  int in = -1, out = -1, device = 1, timeout_ms = 10000;
  uint32_t seed = 7;
  std::string kind = "nccl";
  std::vector<uint64_t> sizes;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--kind")
      a->kind = v;
    else if (k == "--in-fd")
      a->in = std::atoi(v.c_str());
    else if (k == "--out-fd")
      a->out = std::atoi(v.c_str());
    else if (k == "--device")
      a->device = std::atoi(v.c_str());
    else if (k == "--seed")
      a->seed = static_cast<uint32_t>(std::atoll(v.c_str()));
    else if (k == "--timeout-ms")
      a->timeout_ms = std::atoi(v.c_str());
    else if (k == "--sizes") {
      for (size_t at = 0; at < v.size();) {
        size_t comma = std::min(v.find(',', at), v.size());
        a->sizes.push_back(std::strtoull(v.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
      }
    } else {
      return false;
    }
  }
  return a->in >= 0 && a->out >= 0 && !a->sizes.empty();
}

std::string Verify(void* region, uint64_t bytes, int index, const CopyPlan& plan) {
  std::vector<std::byte> got(bytes), want(bytes);
  if (cudaMemcpy(got.data(), region, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
    return "cudaMemcpy of region " + std::to_string(index) + " failed";
  }
  plan.Expected(index, want);
  for (size_t i = 0; i < bytes; ++i) {
    if (got[i] != want[i]) {
      return "region " + std::to_string(index) + " differs first at byte " + std::to_string(i) +
             " of " + std::to_string(bytes);
    }
  }
  return "ok";
}

[[noreturn]] void Fail(int out, const std::string& why) {
  WriteMessage(out, "error: " + why);
  _exit(1);
}

int Main(const Args& a) {
  if (cudaSetDevice(a.device) != cudaSuccess) Fail(a.out, "cannot select the receiver's GPU");
  CopyPlan plan(a.sizes, a.seed);
  TransportConfig config;
  config.kind = a.kind;
  config.cuda_device = a.device;
  config.io_timeout_ms = a.timeout_ms;
  auto transport = CreateTransport(config);
  if (!transport.ok()) Fail(a.out, std::string(transport.status().message()));
  if (!(*transport)->supports_device_memory()) {
    Fail(a.out, "the " + a.kind +
                    " transport here cannot move device memory (ucx: load UCX built with CUDA, "
                    "kvtransfer/README.md)");
  }
  WriteMessage(a.out, "ready");
  std::vector<void*> regions;
  std::vector<uint64_t> sizes;
  std::vector<RegionId> ids;
  auto add = [&](uint64_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
      Fail(a.out, "cudaMalloc of a receiver region failed");
    }
    auto handle = (*transport)->RegisterRegion(p, bytes);
    if (!handle.ok()) Fail(a.out, std::string(handle.status().message()));
    regions.push_back(p);
    sizes.push_back(bytes);
    ids.push_back(handle->id);
    WriteMessage(a.out, handle->descriptor);
  };
  for (uint64_t bytes : a.sizes) add(bytes);
  for (;;) {
    std::optional<std::string> cmd = ReadMessage(a.in, -1);
    if (!cmd || *cmd == "quit") break;
    const int arg = std::atoi(cmd->substr(cmd->find(' ') + 1).c_str());
    if (cmd->rfind("verify ", 0) == 0) {
      WriteMessage(a.out, Verify(regions.at(arg), sizes.at(arg), arg, plan));
    } else if (cmd->rfind("release ", 0) == 0) {
      absl::Status s = (*transport)->ReleaseRegion(ids.at(arg));
      WriteMessage(a.out, s.ok() ? "ok" : std::string(s.message()));
    } else if (cmd->rfind("register ", 0) == 0) {
      add(static_cast<uint64_t>(arg));
    }
  }
  transport->reset();  // a clean shutdown is part of what is tested
  for (void* p : regions) cudaFree(p);
  return 0;
}

}  // namespace
}  // namespace dq::kvtransfer::testing

int main(int argc, char** argv) {
  dq::kvtransfer::testing::Args args;
  if (!dq::kvtransfer::testing::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr,
                 "usage: dq_kv_receiver --kind nccl|ucx --in-fd N --out-fd N --device D "
                 "--seed S --timeout-ms T --sizes a,b,c\n");
    return 2;
  }
  return dq::kvtransfer::testing::Main(args);
}
