// NCCL backend: GPU-to-GPU KV transfer (NVLink inside a node) with no host staging. Regions are
// CUDA device memory of one GPU (TransportConfig::cuda_device).
//
// NCCL is two-sided, the Transport interface one-sided; a TCP control channel bridges them.
// Every transport listens (receiver role). A sender's first Prepare to a receiver connects to
// that listener, sends an ncclUniqueId, and both sides bring up a 2-rank non-blocking
// communicator (sender rank 0, receiver rank 1), reused for every transfer between the pair.
// Post announces a transfer on the control channel (ids, offsets, sizes) and queues one
// ncclSend group on a dedicated stream; the receiver checks every op against its registered
// region, queues the matching ncclRecvs straight into it (a refused op lands in a scratch buffer
// and is reported) and acknowledges once the bytes are there. A dead or stalled peer (control
// socket EOF, no ack within io_timeout_ms) gets its communicator aborted and its transfers failed.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/nccl_connection.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp_socket.h"
#include "kvtransfer/transfer_table.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

class NcclTransport final : public Transport {
 public:
  // Binds the device (config.cuda_device, or the current one) and starts the control listener.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const TransportConfig& config);
  // Fails pending transfers (Cancelled), aborts every communicator, joins every thread.
  ~NcclTransport() override;

  std::string_view name() const override { return "nccl"; }
  bool supports_device_memory() const override { return true; }
  std::string address() const override { return address_; }
  int device() const { return device_; }

  absl::StatusOr<RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) override;
  absl::Status ReleaseRegion(RegionId id) override;
  absl::StatusOr<RemoteRegionId> Prepare(std::string_view descriptor) override;
  absl::Status ReleaseRemote(RemoteRegionId id) override;
  absl::StatusOr<TransferId> Post(RegionId local, RemoteRegionId remote,
                                  std::span<const CopyOp> copies) override;
  TransferStatus Poll(TransferId id) override;

 private:
  struct Remote {
    std::string peer;  // the receiver's control listener
    int cuda_device = 0;
    RegionId region = 0;
    uint64_t bytes = 0;
    RegionKey key{};
  };

  NcclTransport(const TransportConfig& config, int device, std::string bus_id, Fd listener,
                std::string address);
  void AcceptLoop();
  absl::StatusOr<std::shared_ptr<nccl::NcclOutbound>> Peer(const Remote& remote);
  absl::StatusOr<std::shared_ptr<nccl::Transfer>> MakeTransfer(RegionId local, const Remote& remote,
                                                               std::span<const CopyOp> copies);

  const TransportConfig config_;
  const int device_;
  const std::string bus_id_;
  Fd listener_;
  const std::string address_;
  WakeEvent wake_;
  RegionTable regions_;

  std::mutex mu_;
  std::vector<std::unique_ptr<nccl::NcclInbound>> inbound_;
  std::map<std::string, std::shared_ptr<nccl::NcclOutbound>> peers_;
  std::map<RemoteRegionId, Remote> remotes_;
  TransferTable<nccl::Transfer> transfers_;
  uint64_t next_id_ = 1;
  // Serializes connecting: two first Prepares to one receiver must not build two communicators.
  std::mutex connect_mu_;
  std::thread acceptor_;
};

}  // namespace dq::kvtransfer
