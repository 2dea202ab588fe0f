// One interface for moving bytes from a registered local memory region into a registered region
// of another worker (KV pages from prefill to decode), with backends "local", "tcp", "ucx" and
// "nccl" (GPU to GPU; CUDA builds only).
//
// Lifecycle (each step names who calls it; R = receiver, the decode worker; S = sender, the
// prefill worker; one Transport object may play both roles):
//   1. R: RegisterRegion(ptr, bytes) -> RegionHandle. The handle's `descriptor` is opaque bytes
//      that R ships to S (in the KvLease). S also registers its source memory.
//   2. S: Prepare(descriptor) -> RemoteRegionId. Connects to R (connections are shared per peer).
//   3. S: Post(local region, remote region, copies) -> TransferId. Asynchronous: returns once the
//      copies are queued; batch them (one copy per contiguous run per layer, not per block).
//   4. S: Poll(transfer) until kDone or kFailed. A transfer is done only when every byte is in
//      R's memory; R's own code learns of it out of band (the KvCommit through the router).
//   5. S: ReleaseRemote(remote) when the lease is finished; both: ReleaseRegion(region) before
//      freeing the memory.
//
// Thread-safety: every method may be called from any thread concurrently; the transport locks
// internally. Callbacks never run user code.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dq::kvtransfer {

// Names a region registered with this transport; never reused within one process.
using RegionId = uint64_t;
// Names a peer's region prepared on this transport (sender side); never reused by this transport.
using RemoteRegionId = uint64_t;
// Names one Post on this transport; never reused by this transport.
using TransferId = uint64_t;

// What RegisterRegion returns.
// A region's write capability: 128 random bits that only its descriptor carries. A receiver
// accepts a peer's write into a region only with its key, so a peer on the KV port cannot write
// into another lease's blocks by counting region ids (ucx: the packed rkey plays this part).
using RegionKey = std::array<uint8_t, 16>;

struct RegionHandle {
  RegionId id = 0;
  uint64_t bytes = 0;
  // Remote-visible descriptor for Prepare on the peer: backend kind, region id, size, and the
  // backend's address data (tcp: host:port; ucx: worker address, remote address, packed rkey;
  // nccl: control host:port and CUDA device).
  // Format in kvtransfer/README.md; treat it as opaque bytes.
  std::string descriptor;
};

// One contiguous copy: `bytes` bytes from local_offset in the local region to remote_offset in
// the remote region.
struct CopyOp {
  uint64_t local_offset = 0;
  uint64_t remote_offset = 0;
  uint64_t bytes = 0;
};

enum class TransferState { kPending, kDone, kFailed };

// What Poll returns. `error` is set (not OK) exactly when state == kFailed.
struct TransferStatus {
  TransferState state = TransferState::kPending;
  absl::Status error;
};

struct TransportConfig {
  // "local", "tcp", "ucx" or "nccl".
  std::string kind = "tcp";
  // tcp, nccl (its control listener): the address the receiver listens on. Loopback by default so
  // that nothing is exposed by accident; set "0.0.0.0" (with advertise_address) to accept peers on
  // other machines.
  std::string bind_address = "127.0.0.1";
  // tcp, nccl: the listening port; 0 picks a free one (see Transport::address()).
  uint16_t port = 0;
  // tcp, nccl: the host peers connect to, written into descriptors. Empty: bind_address (which then
  // must not be a wildcard address).
  std::string advertise_address;
  // tcp, ucx, nccl: how long a connection may make no progress (connect, send, receive, ack)
  // before its transfers fail. Bounds every wait, so a dead peer never hangs a caller.
  int io_timeout_ms = 10000;
  // nccl: the CUDA device every region lives on; -1: the creating thread's current device.
  int cuda_device = -1;
  // ucx: value for UCX_TLS (e.g. "tcp", "sm", "rc,sm"); empty keeps UCX's default selection.
  std::string ucx_transports;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Backend name: "local", "tcp", "ucx" or "nccl".
  virtual std::string_view name() const = 0;
  // Whether regions live in GPU memory: true for nccl (device memory only), false for the host
  // memory backends.
  virtual bool supports_device_memory() const = 0;
  // Where peers reach this transport, for logs ("127.0.0.1:40123"); empty when not applicable.
  virtual std::string address() const = 0;

  // Registers [ptr, ptr + bytes) for remote writes (receiver) or as a copy source (sender).
  // Preconditions: bytes > 0, the memory stays valid until ReleaseRegion returns. Regions may
  // overlap; each registration gets its own id and descriptor.
  virtual absl::StatusOr<RegionHandle> RegisterRegion(void* ptr, uint64_t bytes) = 0;
  // Forgets a region. Blocks until no copy of this transport's own (as sender, or as tcp/local
  // receiver) reads or writes it; each such copy is bounded by io_timeout_ms. NotFound if `id`
  // is not registered here. Later writes aimed at it: local and tcp refuse them (the sender's
  // transfer fails with NotFound); ucx cannot (one-sided RMA: the peer writes without asking),
  // so with ucx free or reuse the memory only once its sender is known to be done or dead.
  virtual absl::Status ReleaseRegion(RegionId id) = 0;

  // Resolves a peer's descriptor (from RegionHandle::descriptor), connecting to the peer if this
  // transport has no live connection to it yet. Fails with InvalidArgument for a malformed
  // descriptor or one from another backend, Unavailable if the peer cannot be reached.
  virtual absl::StatusOr<RemoteRegionId> Prepare(std::string_view descriptor) = 0;
  // Forgets a prepared remote region (transfers already posted to it still complete).
  virtual absl::Status ReleaseRemote(RemoteRegionId id) = 0;

  // Starts copying `copies` from region `local` to `remote`, in order, as one transfer.
  // Every copy is bounds-checked against both regions first: an out-of-range copy fails the
  // whole Post with OutOfRange and nothing is sent. `copies` may be released once Post returns;
  // the local bytes must not change until the transfer is done or failed.
  virtual absl::StatusOr<TransferId> Post(RegionId local, RemoteRegionId remote,
                                          std::span<const CopyOp> copies) = 0;
  // Non-blocking. kDone: every byte is in the remote memory. kFailed: some bytes may have
  // landed, the error says why. A transfer that returned kDone or kFailed is forgotten: polling
  // it again returns kFailed with NotFound.
  virtual TransferStatus Poll(TransferId id) = 0;
};

// The kinds CreateTransport accepts.
std::span<const std::string_view> TransportKinds();

// Makes the backend named by config.kind; InvalidArgument (listing the kinds) for an unknown one.
absl::StatusOr<std::unique_ptr<Transport>> CreateTransport(const TransportConfig& config);

// Polls `id` until it is done (OK), failed (its error) or `timeout_ms` passes (DeadlineExceeded;
// the transfer is then still pending and must be polled again later).
absl::Status WaitForTransfer(Transport& transport, TransferId id, int timeout_ms);

}  // namespace dq::kvtransfer
