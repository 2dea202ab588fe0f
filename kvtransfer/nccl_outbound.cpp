// Sender side of the nccl backend, and the socket waits both sides share.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cstring>

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/nccl_connection.h"
#include "kvtransfer/nccl_wire.h"

namespace dq::kvtransfer::nccl {
namespace {

// How often the thread looks for overdue acks while transfers are in flight.
constexpr int64_t kTickUs = 20000;

absl::Status PeerGone(int fd, const std::string& peer) {
  if (!PeerHungUp(fd)) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("the kvtransfer receiver ", peer, " closed the control connection"));
}

// Reads an AckHeader and its text; the status the receiver sent (code + text).
absl::StatusOr<std::pair<uint64_t, absl::Status>> ReadAckFrame(int fd, int timeout_ms,
                                                               int wake_fd) {
  char buf[wire::AckHeader::kSize];
  DQ_RETURN_IF_ERROR(RecvAll(fd, buf, sizeof(buf), timeout_ms, wake_fd));
  DQ_ASSIGN_OR_RETURN(wire::AckHeader ack, wire::DecodeAckHeader(buf));
  std::string message(ack.message_bytes, '\0');
  DQ_RETURN_IF_ERROR(RecvAll(fd, message.data(), message.size(), timeout_ms, wake_fd));
  absl::Status status = ack.code == 0
                            ? absl::OkStatus()
                            : absl::Status(static_cast<absl::StatusCode>(ack.code), message);
  return std::make_pair(ack.transfer, std::move(status));
}

absl::Status Handshake(int fd, const std::string& peer, int device, int timeout_ms,
                       ncclComm_t* comm) {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return NcclStatus(r, nullptr, "making an NCCL unique id");
  Hello hello;
  static_assert(sizeof(id.internal) == kUniqueIdBytes);
  std::memcpy(hello.unique_id.data(), id.internal, kUniqueIdBytes);
  DQ_ASSIGN_OR_RETURN(hello.bus_id, PciBusId(device));
  auto frame = EncodeHello(hello);
  DQ_RETURN_IF_ERROR(SendAll(fd, frame.data(), frame.size(), timeout_ms, -1));
  DQ_ASSIGN_OR_RETURN(*comm, StartComm(id, /*rank=*/0));
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(SetupTimeoutMs(timeout_ms));
  // The receiver answers once its rank is up, or at once when it refuses (then our rank would
  // wait for it in vain): watch the socket while the communicator connects.
  absl::Status up = WaitComm(
      *comm, deadline,
      [fd] {
        return WaitFd(fd, -1, 0) == WaitResult::kReady ? absl::AbortedError("answered")
                                                       : absl::OkStatus();
      },
      "connecting the communicator");
  if (!up.ok() && !absl::IsAborted(up)) return up;
  const auto remaining =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  DQ_ASSIGN_OR_RETURN(auto ack, ReadAckFrame(fd, std::max<int>(remaining.count(), 1), -1));
  DQ_RETURN_IF_ERROR(ack.second);
  if (!up.ok()) DQ_RETURN_IF_ERROR(WaitComm(*comm, deadline, {}, "connecting the communicator"));
  return absl::OkStatus();
}

}  // namespace

WaitResult WaitFdMicros(int fd, int wake_fd, int64_t timeout_us) {
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  timespec ts{static_cast<time_t>(timeout_us / 1000000),
              static_cast<long>(timeout_us % 1000000) * 1000};
  const int n = ppoll(fds, wake_fd >= 0 ? 2 : 1, timeout_us < 0 ? nullptr : &ts, nullptr);
  // EINTR counts as a timeout: the caller looks again, and never blocks in a read for nothing.
  if (n <= 0) return WaitResult::kTimeout;
  if (wake_fd >= 0 && (fds[1].revents & POLLIN)) return WaitResult::kWoken;
  return WaitResult::kReady;  // readable, or hung up / failed: the caller's read tells
}

bool PeerHungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

absl::StatusOr<std::shared_ptr<NcclOutbound>> NcclOutbound::Connect(const std::string& peer,
                                                                    int device, int remote_device,
                                                                    int timeout_ms) {
  ScopedDevice scoped(device);
  DQ_RETURN_IF_ERROR(scoped.status());
  DQ_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(peer));
  DQ_ASSIGN_OR_RETURN(Fd fd, ::dq::kvtransfer::Connect(hp, timeout_ms));
  ncclComm_t comm = nullptr;
  absl::Status s = Handshake(fd.get(), peer, device, timeout_ms, &comm);
  cudaStream_t stream = nullptr;
  if (s.ok()) {
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) s = CudaStatus(e, "creating the transfer stream");
  }
  if (!s.ok()) {
    AbortComm(comm);
    return absl::Status(
        s.code(), absl::StrCat("setting up NCCL from cuda:", device, " to the kvtransfer receiver ",
                               peer, " (cuda:", remote_device, " there): ", s.message()));
  }
  return std::shared_ptr<NcclOutbound>(
      new NcclOutbound(std::move(fd), peer, device, timeout_ms, comm, stream));
}

NcclOutbound::NcclOutbound(Fd fd, std::string peer, int device, int timeout_ms, ncclComm_t comm,
                           cudaStream_t stream)
    : fd_(std::move(fd)),
      peer_(std::move(peer)),
      device_(device),
      timeout_ms_(timeout_ms),
      comm_(comm),
      stream_(stream),
      notify_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  thread_ = std::thread([this] { Loop(); });
}

NcclOutbound::~NcclOutbound() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.Signal();
  thread_.join();
  ScopedDevice scoped(device_);
  cudaStreamDestroy(stream_);
}

bool NcclOutbound::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void NcclOutbound::Enqueue(std::shared_ptr<Transfer> transfer) {
  {
    std::lock_guard lock(mu_);
    if (!broken_) {
      queue_.push_back(std::move(transfer));
      const uint64_t one = 1;
      (void)!write(notify_.get(), &one, sizeof(one));
      return;
    }
  }
  transfer->sources.clear();
  transfer->Finish(
      absl::UnavailableError(absl::StrCat("the NCCL connection to kvtransfer receiver ", peer_,
                                          " broke before the transfer started; "
                                          "retry")));
}

void NcclOutbound::Loop() {
  cudaSetDevice(device_);
  for (;;) {
    // Everything queued goes out together: one control write and one group of sends.
    std::vector<std::shared_ptr<Transfer>> next;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      while (!queue_.empty()) {
        next.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (!next.empty()) {
      absl::Status issued = Issue(next);
      if (!issued.ok()) return Break(issued);
      continue;
    }
    pollfd fds[3] = {{fd_.get(), POLLIN, 0}, {wake_.fd(), POLLIN, 0}, {notify_.get(), POLLIN, 0}};
    timespec tick{0, kTickUs * 1000};
    const int n = ppoll(fds, 3, in_flight_.empty() ? nullptr : &tick, nullptr);
    if (n > 0 && (fds[2].revents & POLLIN)) {
      uint64_t count;
      (void)!read(notify_.get(), &count, sizeof(count));
    }
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      absl::Status read = ReadAck();
      if (!read.ok()) return Break(read);
    }
    absl::Status overdue = CheckOverdue();
    if (!overdue.ok()) return Break(overdue);
  }
  Break(absl::CancelledError("the transport was shut down"));
}

absl::Status NcclOutbound::Issue(const std::vector<std::shared_ptr<Transfer>>& batch) {
  // Control first: the receiver queues its ncclRecvs in the order transfers are announced,
  // which is the order of our ncclSends, so every send meets its recv.
  std::string control;
  bool any_ops = false;
  for (const std::shared_ptr<Transfer>& t : batch) {
    auto header = wire::Encode(wire::TransferHeader{
        t->id, t->remote_region, static_cast<uint32_t>(t->ops.size()), t->remote_key});
    control.append(header.data(), header.size());
    for (const CopyOp& op : t->ops) {
      auto h = wire::Encode(wire::OpHeader{op.remote_offset, op.bytes});
      control.append(h.data(), h.size());
    }
    any_ops |= !t->ops.empty();
  }
  DQ_RETURN_IF_ERROR(SendAll(fd_.get(), control.data(), control.size(), timeout_ms_, wake_.fd()));
  const size_t first = in_flight_.size();
  for (const std::shared_ptr<Transfer>& t : batch) in_flight_.push_back({t, Clock::now()});
  if (!any_ops) return absl::OkStatus();
  ncclResult_t first_error = ncclGroupStart();
  for (const std::shared_ptr<Transfer>& t : batch) {
    for (size_t i = 0; i < t->ops.size(); ++i) {
      const std::byte* src = t->sources[i].data();
      ForEachChunk(t->ops[i].bytes, kNcclChunkBytes, [&](uint64_t offset, uint64_t bytes) {
        const ncclResult_t r = ncclSend(src + offset, bytes, ncclInt8, /*peer=*/1, comm_, stream_);
        if (first_error == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first_error = r;
      });
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess) return NcclStatus(first_error, comm_, "queueing ncclSend");
  if (end != ncclSuccess && end != ncclInProgress) {
    return NcclStatus(end, comm_, "queueing ncclSend");
  }
  // Non-blocking: the group may still be connecting (the first send to a peer sets up its
  // channels); the communicator must be ready before the next NCCL call.
  const int fd = fd_.get();
  const int wait_ms = connected_ ? timeout_ms_ : SetupTimeoutMs(timeout_ms_);
  DQ_RETURN_IF_ERROR(WaitComm(
      comm_, Clock::now() + std::chrono::milliseconds(wait_ms),
      [fd, this] { return PeerGone(fd, peer_); }, "queueing ncclSend"));
  connected_ = true;
  const auto issued = Clock::now();  // each ack is due timeout_ms after this
  for (size_t i = first; i < in_flight_.size(); ++i) in_flight_[i].issued = issued;
  return absl::OkStatus();
}

absl::Status NcclOutbound::ReadAck() {
  DQ_ASSIGN_OR_RETURN(auto ack, ReadAckFrame(fd_.get(), timeout_ms_, wake_.fd()));
  if (in_flight_.empty() || in_flight_.front().transfer->id != ack.first) {
    return absl::InternalError(absl::StrCat("receiver acknowledged transfer ", ack.first,
                                            ", which is not the next one in flight"));
  }
  std::shared_ptr<Transfer> t = std::move(in_flight_.front().transfer);
  in_flight_.pop_front();
  last_ack_ = Clock::now();
  // The receiver has every byte (or drained them), so the sends are past our source memory.
  t->sources.clear();
  if (ack.second.ok()) {
    t->Finish(absl::OkStatus());
  } else {
    t->Finish(absl::Status(ack.second.code(),
                           absl::StrCat("kvtransfer receiver ", peer_,
                                        " refused the transfer: ", ack.second.message())));
  }
  return absl::OkStatus();
}

absl::Status NcclOutbound::CheckOverdue() const {
  if (in_flight_.empty()) return absl::OkStatus();
  // Transfers complete in order; the front one is late once neither it nor the one before it
  // made progress for timeout_ms.
  const Clock::time_point since = std::max(in_flight_.front().issued, last_ack_);
  if (Clock::now() - since <= std::chrono::milliseconds(timeout_ms_)) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("no acknowledgement within ", timeout_ms_, " ms"));
}

void NcclOutbound::Break(const absl::Status& why) {
  std::vector<std::shared_ptr<Transfer>> victims;
  {
    std::lock_guard lock(mu_);
    broken_ = true;
    for (auto& t : queue_) victims.push_back(std::move(t));
    queue_.clear();
  }
  // Abort ends our queued ncclSends; only once the stream is idle may the sources be reused.
  AbortComm(comm_);
  comm_ = nullptr;
  absl::Status idle =
      WaitStreamIdle(stream_, Clock::now() + std::chrono::milliseconds(timeout_ms_));
  if (!idle.ok()) SPDLOG_WARN("kvtransfer nccl: after aborting {}: {}", peer_, idle.ToString());
  for (InFlight& f : in_flight_) victims.push_back(std::move(f.transfer));
  in_flight_.clear();
  shutdown(fd_.get(), SHUT_RDWR);
  if (!victims.empty() && !absl::IsCancelled(why)) {
    SPDLOG_WARN("kvtransfer nccl: connection to {} failed with {} transfer(s) in flight: {}", peer_,
                victims.size(), std::string(why.message()));
  }
  const absl::Status status(why.code(),
                            absl::StrCat("kv transfer to ", peer_, " failed: ", why.message(),
                                         "; the decode worker may have exited or stalled: "
                                         "release the lease and retry the request"));
  for (auto& t : victims) {
    t->sources.clear();
    t->Finish(status);
  }
}

}  // namespace dq::kvtransfer::nccl
