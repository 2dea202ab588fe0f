// UCX backend. Host memory with any UCX; CUDA device memory too where the loaded UCX has its
// CUDA transports (the libucx-cu13 wheel's: cuda_ipc between GPUs of one node, cuda_copy; RDMA to
// other nodes needs a UCX with its ib module as well, which that wheel lacks) and the transport
// was given a cuda_device. Debian's UCX 1.13 has no CUDA. Regions are registered with
// ucp_mem_map (CUDA memory type for device memory, found with cudaPointerGetAttributes); a
// region's descriptor carries the owner's UCP worker address, the region's address and its
// packed rkey, so Prepare needs no other exchange: it creates (or reuses) an endpoint to that
// worker and unpacks the rkey. Post merges adjacent copies, issues one ucp_put_nbx per merged
// copy and one endpoint flush; the transfer is done when the flush completes. A progress thread
// drives the worker (the receiver must progress too: over UCX's tcp transport, RMA is emulated
// with active messages; cuda_ipc puts are the sender's cudaMemcpys into the receiver's memory).
//
// io_timeout_ms bounds a whole transfer (UCX reports no partial progress). Endpoints use peer
// error handling, so a dead peer fails its transfers as soon as UCX notices, and the timeout
// covers the rest.
#pragma once

#include <memory>
#include <thread>

#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

class UcxTransport final : public Transport {
 public:
  // Unavailable (with UCX's reason) when UCX cannot start, e.g. no usable transport in UCX_TLS.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const TransportConfig& config);
  // Cancels what is in flight (closing every endpoint) and frees every UCX resource.
  ~UcxTransport() override;

  std::string_view name() const override { return "ucx"; }
  // True when the loaded UCX can move CUDA memory (its context lists UCS_MEMORY_TYPE_CUDA), this
  // build has CUDA and TransportConfig::cuda_device >= 0; then RegisterRegion takes device memory
  // of that device as well as host memory. False: host memory only (workers stage through it).
  bool supports_device_memory() const override;
  std::string address() const override { return ""; }

  absl::StatusOr<RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) override;
  absl::Status ReleaseRegion(RegionId id) override;
  absl::StatusOr<RemoteRegionId> Prepare(std::string_view descriptor) override;
  absl::Status ReleaseRemote(RemoteRegionId id) override;
  absl::StatusOr<TransferId> Post(RegionId local, RemoteRegionId remote,
                                  std::span<const CopyOp> copies) override;
  TransferStatus Poll(TransferId id) override;

  // UCX's description of every live endpoint (ucp_ep_print_info: its lanes and the transports
  // and devices they run on), for logs and tests that need to know what UCX picked.
  std::string DescribeEndpoints();
  // Which UCX is loaded and whether it has CUDA: "UCX 1.22.0 (/path/libucp.so.0), built against
  // 1.13, CUDA memory: yes".
  const std::string& runtime() const;

  // UCX handles and bookkeeping, defined in ucx_transport.cpp so UCX headers stay out of here.
  struct State;

 private:
  explicit UcxTransport(std::unique_ptr<State> state);
  void ProgressLoop();

  std::unique_ptr<State> state_;
  std::thread progress_;
};

}  // namespace dq::kvtransfer
