// The two ends of an nccl-backend pair (CUDA builds only): NcclOutbound (sender side, one per
// receiver: the control connection, the 2-rank communicator as rank 0, a dedicated CUDA stream)
// and NcclInbound (receiver side, one per connected sender: rank 1, its own stream). Each runs
// one thread that makes every NCCL call of its communicator, so NCCL is never entered
// concurrently for one communicator and ncclCommAbort comes from the thread that owns it.
// Internal to the nccl backend; wire format in nccl_wire.h.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/nccl_cuda.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp_connection.h"
#include "kvtransfer/tcp_socket.h"
#include "kvtransfer/tcp_wire.h"

namespace dq::kvtransfer::nccl {

// A posted transfer is the tcp backend's TcpTransfer (id, remote region, ops, pinned sources,
// completion); `sources[i].data()` is device memory here.
using Transfer = TcpTransfer;

class NcclOutbound {
 public:
  // Connects to the receiver's control listener `peer` ("host:port"), sets up the communicator
  // (both sides poll it up within `timeout_ms`) and starts the connection's thread. `device` is
  // the sender's GPU; `remote_device` (from the descriptor) only names the receiver's in errors.
  static absl::StatusOr<std::shared_ptr<NcclOutbound>> Connect(const std::string& peer, int device,
                                                               int remote_device, int timeout_ms);
  // Fails what is still queued or in flight (Cancelled), aborts the communicator, joins.
  ~NcclOutbound();

  // Queues a transfer; fails it at once if the connection is broken.
  void Enqueue(std::shared_ptr<Transfer> transfer);
  bool broken() const;

 private:
  struct InFlight {
    std::shared_ptr<Transfer> transfer;
    Clock::time_point issued;
  };

  NcclOutbound(Fd fd, std::string peer, int device, int timeout_ms, ncclComm_t comm,
               cudaStream_t stream);
  void Loop();
  // Announces `batch` on the control channel (one write) and queues its ncclSends on the stream
  // as one group.
  absl::Status Issue(const std::vector<std::shared_ptr<Transfer>>& batch);
  absl::Status ReadAck();
  absl::Status CheckOverdue() const;
  // Marks the connection dead, aborts the communicator and fails every transfer on it.
  void Break(const absl::Status& why);

  Fd fd_;
  const std::string peer_;
  const int device_;
  const int timeout_ms_;
  ncclComm_t comm_;  // owned by the thread once it runs
  cudaStream_t stream_;
  WakeEvent wake_;  // shutdown
  Fd notify_;       // eventfd, counting: Enqueue queued something

  mutable std::mutex mu_;
  std::deque<std::shared_ptr<Transfer>> queue_;
  bool stopping_ = false;
  bool broken_ = false;
  // Issued, not yet acknowledged, in issue order (= ack order). The thread's alone.
  std::deque<InFlight> in_flight_;
  Clock::time_point last_ack_{};
  bool connected_ = false;  // a send group went through: the channels are up (SetupTimeoutMs)
  std::thread thread_;
};

class NcclInbound {
 public:
  // Serves one sender connected to the control listener: handshake, then transfers into
  // `regions` (device memory of `device`, whose PCI bus id is `bus_id`).
  NcclInbound(Fd fd, std::string peer, RegionTable* regions, int device, std::string bus_id,
              int timeout_ms);
  ~NcclInbound();  // stops (aborting the communicator), joins
  bool finished() const { return finished_.load(); }

 private:
  struct InFlight {
    uint64_t transfer = 0;
    absl::Status error;             // a refused op: its bytes went to the scratch buffer
    std::vector<PinnedRange> pins;  // the target ranges, held until the recvs ended
    cudaEvent_t done = nullptr;     // recorded after the recvs
    Clock::time_point posted;
  };

  // A transfer the sender announced: its ops, their pinned targets (or the refusal), its event.
  struct Announced {
    std::vector<wire::OpHeader> ops;
    InFlight f;
  };

  void Serve();
  absl::Status Handshake();
  absl::Status ServeLoop();
  // Reads the ops of `header`, checks and pins their targets, takes an event for them.
  absl::StatusOr<Announced> Announce(const wire::TransferHeader& header);
  // Queues the recvs of every transfer in `batch` as one group; moves them to in_flight_.
  absl::Status PostBatch(std::vector<Announced>& batch);
  absl::Status PostRecvs(const std::vector<Announced>& batch);
  // Acknowledges every transfer at the front whose recvs have ended.
  absl::Status AckFinished();
  absl::Status SendAck(uint64_t transfer, const absl::Status& status);
  // Cancelled once the transport shuts down, Unavailable once the sender hung up; for waits.
  absl::Status Interrupted() const;
  // The device buffer a refused transfer's bytes are received into (kNcclChunkBytes).
  absl::Status Scratch();
  // After a failure: abort the communicator, then let go of the targets once the stream drained.
  void Teardown();

  Fd fd_;
  const std::string peer_;
  RegionTable* regions_;
  const int device_;
  const std::string bus_id_;
  const int timeout_ms_;
  WakeEvent wake_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
  Clock::time_point last_progress_{};
  bool connected_ = false;  // a recv group went through: the channels are up (SetupTimeoutMs)
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Waits until `fd` is readable (or hung up) or `wake_fd` is signalled, at most timeout_us
// (-1: no limit). kReady also for errors, so that the next read reports them; kTimeout also when
// a signal interrupted the wait.
WaitResult WaitFdMicros(int fd, int wake_fd, int64_t timeout_us);
// Whether the peer of `fd` has closed or reset the connection (without reading anything).
bool PeerHungUp(int fd);

}  // namespace dq::kvtransfer::nccl
