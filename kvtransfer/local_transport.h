// Same-process backend: a Post is a memcpy between two regions registered in this process (by
// this or any other LocalTransport), done before Post returns. For a single-process deployment
// and for tests of the code above kvtransfer.
#pragma once

#include <map>
#include <mutex>
#include <set>

#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

class LocalTransport final : public Transport {
 public:
  LocalTransport() = default;
  ~LocalTransport() override;

  std::string_view name() const override { return "local"; }
  bool supports_device_memory() const override { return false; }
  std::string address() const override { return ""; }

  absl::StatusOr<RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) override;
  absl::Status ReleaseRegion(RegionId id) override;
  absl::StatusOr<RemoteRegionId> Prepare(std::string_view descriptor) override;
  absl::Status ReleaseRemote(RemoteRegionId id) override;
  absl::StatusOr<TransferId> Post(RegionId local, RemoteRegionId remote,
                                  std::span<const CopyOp> copies) override;
  TransferStatus Poll(TransferId id) override;

 private:
  struct Remote {
    RegionId region = 0;
    uint64_t bytes = 0;
  };
  absl::Status Copy(RegionId local, RegionId remote, std::span<const CopyOp> copies);

  std::mutex mu_;
  std::set<RegionId> own_regions_;
  std::map<RemoteRegionId, Remote> remotes_;
  std::map<TransferId, TransferStatus> finished_;
  uint64_t next_id_ = 1;
};

}  // namespace dq::kvtransfer
