// Sender side of the tcp backend.
#include <sys/socket.h>

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/tcp_connection.h"

namespace dq::kvtransfer {
namespace {

// How often the ack thread wakes to look for overdue acks; well below any sane io timeout.
constexpr int kAckTickMs = 50;

}  // namespace

void TcpTransfer::Finish(absl::Status status) {
  std::lock_guard lock(mu_);
  if (state_ != TransferState::kPending) return;
  state_ = status.ok() ? TransferState::kDone : TransferState::kFailed;
  error_ = std::move(status);
}

TransferStatus TcpTransfer::status() const {
  std::lock_guard lock(mu_);
  return {state_, error_};
}

absl::StatusOr<std::shared_ptr<TcpOutbound>> TcpOutbound::Connect(const std::string& peer,
                                                                  int timeout_ms) {
  DQ_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(peer));
  DQ_ASSIGN_OR_RETURN(Fd fd, ::dq::kvtransfer::Connect(hp, timeout_ms));
  return std::shared_ptr<TcpOutbound>(new TcpOutbound(std::move(fd), peer, timeout_ms));
}

TcpOutbound::TcpOutbound(Fd fd, std::string peer, int timeout_ms)
    : fd_(std::move(fd)), peer_(std::move(peer)), timeout_ms_(timeout_ms) {
  sender_ = std::thread([this] { SendLoop(); });
  acker_ = std::thread([this] { AckLoop(); });
}

TcpOutbound::~TcpOutbound() {
  Break(absl::CancelledError("the transport was shut down"));
  sender_.join();
  acker_.join();
}

bool TcpOutbound::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void TcpOutbound::Enqueue(std::shared_ptr<TcpTransfer> transfer) {
  {
    std::lock_guard lock(mu_);
    if (!broken_) {
      queue_.push_back(std::move(transfer));
      queued_.notify_one();
      return;
    }
  }
  transfer->sources.clear();
  transfer->Finish(absl::UnavailableError(absl::StrCat(
      "connection to kvtransfer receiver ", peer_, " broke before the transfer started; retry")));
}

void TcpOutbound::Break(absl::Status why) {
  std::vector<std::shared_ptr<TcpTransfer>> victims;
  {
    std::lock_guard lock(mu_);
    if (broken_) return;
    broken_ = true;
    for (auto& t : queue_) {
      t->sources.clear();  // never handed to the send thread: nobody reads them any more
      victims.push_back(std::move(t));
    }
    queue_.clear();
    for (auto& [id, t] : unacked_) victims.push_back(std::move(t));
    unacked_.clear();
    sent_at_.clear();
  }
  // Wakes both threads: blocked sends/receives fail at once, polls see the wake event.
  shutdown(fd_.get(), SHUT_RDWR);
  wake_.Signal();
  queued_.notify_all();
  if (!victims.empty() && why.code() != absl::StatusCode::kCancelled) {
    SPDLOG_WARN("kvtransfer tcp: connection to {} failed with {} transfer(s) in flight: {}", peer_,
                victims.size(), std::string(why.message()));
  }
  absl::Status status(why.code(),
                      absl::StrCat("kv transfer to ", peer_, " failed: ", why.message(),
                                   "; the decode worker may have exited or stalled: release the "
                                   "lease and retry the request"));
  for (auto& t : victims) t->Finish(status);
}

void TcpOutbound::SendLoop() {
  for (;;) {
    std::shared_ptr<TcpTransfer> t;
    {
      std::unique_lock lock(mu_);
      queued_.wait(lock, [&] { return broken_ || !queue_.empty(); });
      if (broken_) return;
      t = std::move(queue_.front());
      queue_.pop_front();
      // Registered before the first byte leaves: the ack may arrive before SendTransfer returns.
      unacked_[t->id] = t;
    }
    absl::Status sent = SendTransfer(*t);
    t->sources.clear();  // the kernel holds the bytes now (or the transfer failed)
    if (!sent.ok()) {
      Break(sent);
      return;
    }
    std::lock_guard lock(mu_);
    if (unacked_.count(t->id) != 0) sent_at_[t->id] = Clock::now();
  }
}

absl::Status TcpOutbound::SendTransfer(TcpTransfer& t) {
  auto header = wire::Encode(wire::TransferHeader{
      t.id, t.remote_region, static_cast<uint32_t>(t.ops.size()), t.remote_key});
  DQ_RETURN_IF_ERROR(
      SendAll(fd_.get(), header.data(), header.size(), timeout_ms_, wake_.fd(), /*more=*/true));
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const CopyOp& op = t.ops[i];
    auto op_header = wire::Encode(wire::OpHeader{op.remote_offset, op.bytes});
    DQ_RETURN_IF_ERROR(SendAll(fd_.get(), op_header.data(), op_header.size(), timeout_ms_,
                               wake_.fd(), /*more=*/true));
    // Straight from the registered memory: large payloads stream without a staging copy.
    DQ_RETURN_IF_ERROR(SendAll(fd_.get(), t.sources[i].data(), op.bytes, timeout_ms_, wake_.fd(),
                               /*more=*/i + 1 < t.ops.size()));
  }
  return absl::OkStatus();
}

void TcpOutbound::AckLoop() {
  for (;;) {
    WaitResult w = WaitFd(fd_.get(), wake_.fd(), kAckTickMs);
    if (w == WaitResult::kWoken) return;
    if (w == WaitResult::kReady) {
      absl::Status read = ReadAck();
      if (!read.ok()) {
        Break(read);
        return;
      }
      continue;
    }
    bool overdue = false;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, at] : sent_at_) {
        overdue |= Clock::now() - at > std::chrono::milliseconds(timeout_ms_);
      }
    }
    if (overdue) {
      Break(absl::DeadlineExceededError(
          absl::StrCat("no acknowledgement within ", timeout_ms_, " ms of the last byte")));
      return;
    }
  }
}

absl::Status TcpOutbound::ReadAck() {
  char buf[wire::AckHeader::kSize];
  DQ_RETURN_IF_ERROR(RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd()));
  DQ_ASSIGN_OR_RETURN(wire::AckHeader ack, wire::DecodeAckHeader(buf));
  std::string message(ack.message_bytes, '\0');
  DQ_RETURN_IF_ERROR(RecvAll(fd_.get(), message.data(), message.size(), timeout_ms_, wake_.fd()));
  std::shared_ptr<TcpTransfer> t;
  {
    std::lock_guard lock(mu_);
    auto it = unacked_.find(ack.transfer);
    if (it != unacked_.end()) {
      t = std::move(it->second);
      unacked_.erase(it);
      sent_at_.erase(ack.transfer);
    }
  }
  if (t == nullptr) {
    return absl::InternalError(
        absl::StrCat("receiver acknowledged transfer ", ack.transfer, ", which is not in flight"));
  }
  if (ack.code == 0) {
    t->Finish(absl::OkStatus());
  } else {
    t->Finish(absl::Status(
        static_cast<absl::StatusCode>(ack.code),
        absl::StrCat("kvtransfer receiver ", peer_, " refused the transfer: ", message)));
  }
  return absl::OkStatus();
}

}  // namespace dq::kvtransfer
