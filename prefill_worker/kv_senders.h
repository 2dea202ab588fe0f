// The prefill worker's KV transports: one per backend it was started with, each with the K and V
// source memory registered once (whole regions, as copy sources: the pool itself on the CPU, the
// staging arena on a device; kv_stager.h), so that a request only prepares the lease's remote
// regions.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kvtransfer/transport.h"

namespace dq::prefill {

struct KvSender {
  std::unique_ptr<kvtransfer::Transport> transport;
  kvtransfer::RegionId keys = 0;    // KvSourceMemory::keys
  kvtransfer::RegionId values = 0;  // KvSourceMemory::values
};

// Where the transports read K and V from: two host regions of `bytes` bytes each.
struct KvSourceMemory {
  char* keys = nullptr;
  char* values = nullptr;
  uint64_t bytes = 0;
};

struct KvSendersOptions {
  std::vector<std::string> kinds = {"tcp"};
  int io_timeout_ms = 10000;
  // tcp listens even as a sender; loopback keeps it unexposed.
  std::string bind_address = "127.0.0.1";
};

class KvSenders {
 public:
  // Creates each transport and registers `source` with it. The memory must outlive this.
  static absl::StatusOr<std::unique_ptr<KvSenders>> Create(const KvSourceMemory& source,
                                                           const KvSendersOptions& options);
  // Releases the registered regions (blocks until no copy reads them).
  ~KvSenders();

  // The sender for backend `kind`, or nullptr when this worker was not started with it.
  KvSender* Find(const std::string& kind);
  const std::vector<std::string>& kinds() const { return kinds_; }

 private:
  KvSenders() = default;
  std::vector<std::string> kinds_;
  std::map<std::string, KvSender> senders_;
};

}  // namespace dq::prefill
