// The two halves of a tcp-backend connection: TcpOutbound (sender side: queues transfers, writes
// them, reads acks) and TcpInbound (receiver side: writes payloads into registered regions and
// acks each transfer). Internal to the tcp backend.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp_socket.h"
#include "kvtransfer/tcp_wire.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

// One posted transfer, shared by the transport (for Poll) and the connection carrying it.
struct TcpTransfer {
  TransferId id = 0;
  RegionId remote_region = 0;
  RegionKey remote_key{};  // the receiver's capability for that region
  std::vector<CopyOp> ops;
  // Pins on the local source ranges (one per op), held until the bytes are handed to the kernel.
  std::vector<PinnedRange> sources;

  // Completes the transfer; only the first call has an effect.
  void Finish(absl::Status status);
  TransferStatus status() const;

 private:
  mutable std::mutex mu_;
  TransferState state_ = TransferState::kPending;
  absl::Status error_;
};

// A connection to one receiver, shared by every transfer to it (connection reuse per peer).
// One thread writes queued transfers in order; another reads acks and enforces the ack timeout.
class TcpOutbound {
 public:
  // Connects to `peer` ("host:port").
  static absl::StatusOr<std::shared_ptr<TcpOutbound>> Connect(const std::string& peer,
                                                              int timeout_ms);
  ~TcpOutbound();  // fails whatever is still queued or unacknowledged, then joins its threads

  // Queues a transfer; fails it at once if the connection is already broken.
  void Enqueue(std::shared_ptr<TcpTransfer> transfer);
  bool broken() const;

 private:
  TcpOutbound(Fd fd, std::string peer, int timeout_ms);
  void SendLoop();
  absl::Status SendTransfer(TcpTransfer& t);
  void AckLoop();
  absl::Status ReadAck();
  // Marks the connection dead and fails every transfer on it with `why`.
  void Break(absl::Status why);

  using Clock = std::chrono::steady_clock;
  Fd fd_;
  std::string peer_;
  int timeout_ms_;
  WakeEvent wake_;
  mutable std::mutex mu_;
  std::condition_variable queued_;
  std::deque<std::shared_ptr<TcpTransfer>> queue_;
  // Transfers taken off the queue and not yet acknowledged, by id.
  std::map<TransferId, std::shared_ptr<TcpTransfer>> unacked_;
  // When each fully sent transfer's last byte left; the ack must come within timeout_ms.
  std::map<TransferId, Clock::time_point> sent_at_;
  bool broken_ = false;
  std::thread sender_;
  std::thread acker_;
};

// One accepted connection on the receiver: a thread that serves transfers until the peer
// disconnects or the transport shuts down.
class TcpInbound {
 public:
  TcpInbound(Fd fd, std::string peer, RegionTable* regions, int timeout_ms);
  ~TcpInbound();  // stops and joins
  bool finished() const { return finished_.load(); }

 private:
  void Serve();
  absl::Status ServeTransfer(const wire::TransferHeader& header);
  // Receives one op's payload into the region (or drains it when *error is set or becomes set).
  // Returns a connection-level error; a problem with the op itself goes to *error.
  absl::Status ReceiveOp(RegionId region, const wire::OpHeader& op, absl::Status* error);
  absl::Status Drain(uint64_t bytes);

  Fd fd_;
  std::string peer_;
  RegionTable* regions_;
  int timeout_ms_;
  WakeEvent wake_;
  std::vector<char> scratch_;  // where bytes aimed at a bad range go
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace dq::kvtransfer
