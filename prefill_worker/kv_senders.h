// The prefill worker's KV transports: one per backend it was started with, each with the K and V
// source memory registered once (whole regions, as copy sources), so that a request only
// prepares the lease's remote regions. A transport that moves device memory (nccl) registers a
// GPU cache itself and its posts read the cache's blocks ("direct"); the others register host
// memory: the pool itself on the CPU, the staging arena for a GPU cache (kv_stager.h).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "kvtransfer/transport.h"
#include "prefill_worker/lease_plan.h"

namespace dq::prefill {

struct KvSender {
  std::unique_ptr<kvtransfer::Transport> transport;
  kvtransfer::RegionId keys = 0;    // KvSourceMemory::keys
  kvtransfer::RegionId values = 0;  // KvSourceMemory::values
  // The sources are the device cache itself: posts read its blocks (after the layer's compute,
  // KvStaging::AfterWritten), with `geometry` the cache's layout.
  bool direct = false;
  KvTensorLayout geometry;  // the layout of what `keys`/`values` name, for LeasePlan
  // A hybrid model's state slots (RegisterStateSlots), every slot one after another; 0: none.
  kvtransfer::RegionId state_slots = 0;
};

// Where a transport reads K and V from: two regions of `bytes` bytes each, laid out as `geometry`.
struct KvSourceMemory {
  char* keys = nullptr;
  char* values = nullptr;
  uint64_t bytes = 0;
  KvTensorLayout geometry;
};

struct KvSendersOptions {
  std::vector<std::string> kinds = {"tcp"};
  int io_timeout_ms = 10000;
  // tcp listens even as a sender; loopback keeps it unexposed.
  std::string bind_address = "127.0.0.1";
  // The GPU of the worker's cache (device-memory transports bind to it); -1: the CPU.
  int cuda_device = -1;
  // Tests: kinds registered on the device source although their transport moves host memory
  // (the CPU pool standing in for a GPU cache, worker::CreateHostCopyKvStaging).
  std::set<std::string> direct_for_tests;
};

class KvSenders {
 public:
  // Creates each transport (nothing registered yet).
  static absl::StatusOr<std::unique_ptr<KvSenders>> Create(const KvSendersOptions& options);
  // Releases the registered regions (blocks until no copy reads them).
  ~KvSenders();

  // Whether some transport reads host memory (a GPU worker then needs its staging arena).
  bool any_host() const;
  // Registers each transport's sources: `device` (a GPU cache; null keys when the cache is host
  // memory) for the direct ones, `host` (the pool or the arena) for the others. Both must
  // outlive this. FailedPrecondition when a device-memory transport meets a host cache.
  absl::Status Register(const KvSourceMemory& host, const KvSourceMemory& device);
  // Registers a hybrid model's state slots (host memory: `bytes` at `data`) with every
  // transport, as the source of state slot parts. FailedPrecondition for a device-memory one.
  absl::Status RegisterStateSlots(char* data, uint64_t bytes);

  // The sender for backend `kind`, or nullptr when this worker was not started with it.
  KvSender* Find(const std::string& kind);
  const std::vector<std::string>& kinds() const { return kinds_; }

 private:
  KvSenders() = default;
  std::vector<std::string> kinds_;
  std::map<std::string, KvSender> senders_;
};

}  // namespace dq::prefill
