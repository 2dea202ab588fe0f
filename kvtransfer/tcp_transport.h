// TCP backend: works between any two hosts. Every transport listens (the receiver role: a
// decode worker's regions are written by incoming connections) and connects on demand (the
// sender role: one connection per peer, reused by every transfer to it). Payloads go straight
// from the sender's registered memory into the receiver's, bounds-checked on both ends.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp_connection.h"
#include "kvtransfer/tcp_socket.h"
#include "kvtransfer/transfer_table.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

class TcpTransport final : public Transport {
 public:
  // Starts listening on config.bind_address:config.port.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const TransportConfig& config);
  // Fails every pending transfer (Cancelled), closes every connection, joins every thread.
  ~TcpTransport() override;

  std::string_view name() const override { return "tcp"; }
  bool supports_device_memory() const override { return false; }
  std::string address() const override { return address_; }

  absl::StatusOr<RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) override;
  absl::Status ReleaseRegion(RegionId id) override;
  absl::StatusOr<RemoteRegionId> Prepare(std::string_view descriptor) override;
  absl::Status ReleaseRemote(RemoteRegionId id) override;
  absl::StatusOr<TransferId> Post(RegionId local, RemoteRegionId remote,
                                  std::span<const CopyOp> copies) override;
  TransferStatus Poll(TransferId id) override;

 private:
  struct Remote {
    std::string peer;  // host:port of the receiver
    RegionId region = 0;
    uint64_t bytes = 0;
    RegionKey key{};
  };

  TcpTransport(const TransportConfig& config, Fd listener, std::string address);
  void AcceptLoop();
  // The live connection to `peer`, connecting (again) if there is none or it broke.
  absl::StatusOr<std::shared_ptr<TcpOutbound>> Peer(const std::string& peer);
  absl::StatusOr<std::shared_ptr<TcpTransfer>> MakeTransfer(RegionId local, const Remote& remote,
                                                            std::span<const CopyOp> copies);

  const TransportConfig config_;
  Fd listener_;
  const std::string address_;
  WakeEvent wake_;
  RegionTable regions_;

  std::mutex mu_;
  std::vector<std::unique_ptr<TcpInbound>> inbound_;
  std::map<std::string, std::shared_ptr<TcpOutbound>> peers_;
  std::map<RemoteRegionId, Remote> remotes_;
  TransferTable<TcpTransfer> transfers_;
  uint64_t next_id_ = 1;
  std::thread acceptor_;
};

}  // namespace dq::kvtransfer
