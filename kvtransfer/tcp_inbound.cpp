// Receiver side of the tcp backend.
#include <sys/socket.h>

#include <algorithm>

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/tcp_connection.h"

namespace dq::kvtransfer {
namespace {

// Bytes received per pin of the target region. Pinning per chunk (not per op) means a
// ReleaseRegion waits for at most one chunk, never for a slow sender's whole payload.
constexpr uint64_t kChunkBytes = 8u << 20;
constexpr size_t kScratchBytes = 1u << 20;

}  // namespace

TcpInbound::TcpInbound(Fd fd, std::string peer, RegionTable* regions, int timeout_ms)
    : fd_(std::move(fd)), peer_(std::move(peer)), regions_(regions), timeout_ms_(timeout_ms) {
  thread_ = std::thread([this] { Serve(); });
}

TcpInbound::~TcpInbound() {
  wake_.Signal();
  thread_.join();
}

void TcpInbound::Serve() {
  for (;;) {
    // Between transfers a connection may idle for as long as the sender likes.
    if (WaitFd(fd_.get(), wake_.fd(), -1) == WaitResult::kWoken) break;
    char buf[wire::TransferHeader::kSize];
    absl::Status s = RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd());
    if (!s.ok()) {
      // A sender that disconnects between transfers is normal (it shut down or reconnected).
      SPDLOG_DEBUG("kvtransfer tcp: connection from {} closed: {}", peer_,
                   std::string(s.message()));
      break;
    }
    absl::StatusOr<wire::TransferHeader> header = wire::DecodeTransferHeader(buf);
    s = header.ok() ? ServeTransfer(*header) : header.status();
    if (!s.ok()) {
      if (s.code() != absl::StatusCode::kCancelled) {
        SPDLOG_WARN("kvtransfer tcp: dropping the connection from {}: {}", peer_,
                    std::string(s.message()));
      }
      break;
    }
  }
  shutdown(fd_.get(), SHUT_RDWR);
  finished_.store(true);
}

absl::Status TcpInbound::ServeTransfer(const wire::TransferHeader& header) {
  // The first problem with this transfer; the rest of its payload is drained and the ack says why.
  absl::Status error = regions_->CheckKey(header.region, header.key);
  absl::StatusOr<uint64_t> region_bytes = regions_->Size(header.region);
  if (!region_bytes.ok()) {
    error = absl::NotFoundError(absl::StrCat(
        "region ", header.region,
        " is not registered on the receiver (released, or its lease expired); reserve a new "
        "lease"));
  }
  for (uint32_t i = 0; i < header.num_ops; ++i) {
    char buf[wire::OpHeader::kSize];
    DQ_RETURN_IF_ERROR(RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd()));
    wire::OpHeader op = wire::DecodeOpHeader(buf);
    if (error.ok()) {
      error = CheckRange(op.remote_offset, op.bytes, *region_bytes,
                         absl::StrCat("receiver region ", header.region));
    }
    DQ_RETURN_IF_ERROR(ReceiveOp(header.region, op, &error));
  }
  std::string message(error.message().substr(0, wire::kMaxMessageBytes));
  auto ack = wire::Encode(wire::AckHeader{header.transfer, static_cast<uint32_t>(error.code()),
                                          static_cast<uint32_t>(message.size())});
  DQ_RETURN_IF_ERROR(
      SendAll(fd_.get(), ack.data(), ack.size(), timeout_ms_, wake_.fd(), !message.empty()));
  return SendAll(fd_.get(), message.data(), message.size(), timeout_ms_, wake_.fd());
}

absl::Status TcpInbound::ReceiveOp(RegionId region, const wire::OpHeader& op, absl::Status* error) {
  uint64_t done = 0;
  while (done < op.bytes) {
    if (!error->ok()) return Drain(op.bytes - done);
    // Wait without holding a pin, then pin and read what is already there.
    WaitResult w = WaitFd(fd_.get(), wake_.fd(), timeout_ms_);
    if (w == WaitResult::kWoken) return absl::CancelledError("the transport was shut down");
    if (w == WaitResult::kTimeout) {
      return absl::DeadlineExceededError(absl::StrCat("sender ", peer_, " sent nothing for ",
                                                      timeout_ms_, " ms in the middle of a copy"));
    }
    uint64_t want = std::min(op.bytes - done, kChunkBytes);
    absl::StatusOr<PinnedRange> target = PinRange(*regions_, region, op.remote_offset + done, want);
    if (!target.ok()) {
      *error = target.status();  // released while being written: drain the rest
      continue;
    }
    DQ_ASSIGN_OR_RETURN(size_t n, RecvSome(fd_.get(), target->data(), want, timeout_ms_, -1));
    done += n;
  }
  return absl::OkStatus();
}

absl::Status TcpInbound::Drain(uint64_t bytes) {
  scratch_.resize(kScratchBytes);
  while (bytes > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(bytes, scratch_.size()));
    DQ_ASSIGN_OR_RETURN(size_t n,
                        RecvSome(fd_.get(), scratch_.data(), want, timeout_ms_, wake_.fd()));
    bytes -= n;
  }
  return absl::OkStatus();
}

}  // namespace dq::kvtransfer
