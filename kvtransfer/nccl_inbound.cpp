// Receiver side of the nccl backend.
#include <sys/socket.h>

#include <cstring>

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/nccl_connection.h"
#include "kvtransfer/nccl_wire.h"

namespace dq::kvtransfer::nccl {
namespace {

// While recvs are in flight the thread checks their events this often (an ack's latency).
constexpr int64_t kPollUs = 50;
// At most this many announced transfers go into one group of recvs.
constexpr size_t kMaxBatch = 256;

}  // namespace

NcclInbound::NcclInbound(Fd fd, std::string peer, RegionTable* regions, int device,
                         std::string bus_id, int timeout_ms)
    : fd_(std::move(fd)),
      peer_(std::move(peer)),
      regions_(regions),
      device_(device),
      bus_id_(std::move(bus_id)),
      timeout_ms_(timeout_ms) {
  thread_ = std::thread([this] { Serve(); });
}

NcclInbound::~NcclInbound() {
  wake_.Signal();
  thread_.join();
}

void NcclInbound::Serve() {
  absl::Status s;
  const cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) s = CudaStatus(e, absl::StrCat("selecting cuda:", device_));
  if (s.ok()) s = Handshake();
  if (s.ok()) {
    last_progress_ = Clock::now();
    s = ServeLoop();
  }
  if (!s.ok() && !absl::IsCancelled(s)) {
    SPDLOG_WARN("kvtransfer nccl: dropping the connection from {}: {}", peer_,
                std::string(s.message()));
  }
  Teardown();
  finished_.store(true);
}

absl::Status NcclInbound::Handshake() {
  char buf[Hello::kSize];
  DQ_RETURN_IF_ERROR(RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd()));
  absl::StatusOr<Hello> hello = DecodeHello(buf);
  absl::Status refuse = hello.status();
  if (refuse.ok() && hello->bus_id == bus_id_) {
    // NCCL cannot put two ranks of one communicator on one GPU; say so before it fails vaguely.
    refuse = absl::FailedPreconditionError(absl::StrCat(
        "the prefill and decode workers both use the GPU at PCI ", bus_id_,
        "; the nccl transport moves KV between two GPUs: give them different --device (or use "
        "tcp)"));
  }
  if (!refuse.ok()) {
    (void)SendAck(0, refuse);
    return refuse;
  }
  ncclUniqueId id;
  std::memcpy(id.internal, hello->unique_id.data(), kUniqueIdBytes);
  absl::StatusOr<ncclComm_t> comm = StartComm(id, /*rank=*/1);
  absl::Status up = comm.status();
  if (up.ok()) {
    comm_ = *comm;
    up = WaitComm(
        comm_, Clock::now() + std::chrono::milliseconds(SetupTimeoutMs(timeout_ms_)),
        [this] { return Interrupted(); }, "connecting the communicator");
  }
  if (up.ok()) {
    const cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) up = CudaStatus(e, "creating the transfer stream");
  }
  (void)SendAck(0, up);
  return up;
}

absl::Status NcclInbound::ServeLoop() {
  for (;;) {
    // Idle: wait for the next announcement as long as the sender likes; busy: poll the events.
    const WaitResult w =
        WaitFdMicros(fd_.get(), wake_.fd(), in_flight_.empty() ? int64_t{-1} : kPollUs);
    if (w == WaitResult::kWoken) return absl::CancelledError("the transport was shut down");
    if (w == WaitResult::kReady) {
      // Every announcement already here joins one group of recvs: one enqueue (and one wait
      // for the communicator) for a burst of transfers instead of one each.
      std::vector<Announced> batch;
      do {
        char buf[wire::TransferHeader::kSize];
        absl::Status got = RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd());
        if (!got.ok() && in_flight_.empty() && batch.empty()) {
          // A sender that disconnects between transfers is normal (it shut down or reconnected).
          SPDLOG_DEBUG("kvtransfer nccl: connection from {} closed: {}", peer_,
                       std::string(got.message()));
          return absl::CancelledError("the sender disconnected");
        }
        DQ_RETURN_IF_ERROR(got);
        DQ_ASSIGN_OR_RETURN(wire::TransferHeader header, wire::DecodeTransferHeader(buf));
        DQ_ASSIGN_OR_RETURN(Announced a, Announce(header));
        batch.push_back(std::move(a));
      } while (batch.size() < kMaxBatch &&
               WaitFdMicros(fd_.get(), wake_.fd(), 0) == WaitResult::kReady);
      DQ_RETURN_IF_ERROR(PostBatch(batch));
    }
    DQ_RETURN_IF_ERROR(AckFinished());
    if (!in_flight_.empty() && Clock::now() - std::max(in_flight_.front().posted, last_progress_) >
                                   std::chrono::milliseconds(timeout_ms_)) {
      return absl::DeadlineExceededError(absl::StrCat("sender ", peer_, " sent no KV bytes for ",
                                                      timeout_ms_, " ms of a transfer"));
    }
  }
}

absl::StatusOr<NcclInbound::Announced> NcclInbound::Announce(const wire::TransferHeader& header) {
  Announced a;
  a.ops.resize(header.num_ops);
  for (wire::OpHeader& op : a.ops) {
    char buf[wire::OpHeader::kSize];
    DQ_RETURN_IF_ERROR(RecvAll(fd_.get(), buf, sizeof(buf), timeout_ms_, wake_.fd()));
    op = wire::DecodeOpHeader(buf);
  }
  InFlight& f = a.f;
  f.transfer = header.transfer;
  f.posted = Clock::now();
  // Check the key and every op before any recv: a bad one (a released region, a forged
  // descriptor) sends the whole transfer into the scratch buffer and the ack says why.
  if (absl::Status key = regions_->CheckKey(header.region, header.key); !key.ok()) {
    f.error = key;
  }
  for (const wire::OpHeader& op : a.ops) {
    if (!f.error.ok()) break;
    absl::StatusOr<PinnedRange> pin =
        PinRange(*regions_, header.region, op.remote_offset, op.bytes);
    if (!pin.ok()) {
      f.error = absl::Status(pin.status().code(), absl::StrCat("receiver region ", header.region,
                                                               ": ", pin.status().message()));
      f.pins.clear();
      break;
    }
    f.pins.push_back(std::move(*pin));
  }
  if (!a.ops.empty()) {
    if (!free_events_.empty()) {
      f.done = free_events_.back();
      free_events_.pop_back();
    } else {
      DQ_NCCL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&f.done, cudaEventDisableTiming),
                                   "creating a CUDA event");
    }
  }
  return a;
}

absl::Status NcclInbound::PostBatch(std::vector<Announced>& batch) {
  absl::Status posted = PostRecvs(batch);
  const auto now = Clock::now();  // after a first transfer's channel setup, which is not a stall
  for (Announced& a : batch) {
    if (posted.ok() && a.f.done != nullptr) a.f.posted = now;
    // On failure some recvs may be queued: Teardown lets go of the targets only after the abort.
    in_flight_.push_back(std::move(a.f));
  }
  return posted;
}

absl::Status NcclInbound::PostRecvs(const std::vector<Announced>& batch) {
  bool any = false;
  for (const Announced& a : batch) {
    any |= !a.ops.empty();
    if (!a.f.error.ok()) DQ_RETURN_IF_ERROR(Scratch());
  }
  if (!any) return absl::OkStatus();
  ncclResult_t first_error = ncclGroupStart();
  for (const Announced& a : batch) {
    for (size_t i = 0; i < a.ops.size(); ++i) {
      // The sender cuts each op into the same chunks (nccl_wire.h), so the counts match.
      ForEachChunk(a.ops[i].bytes, kNcclChunkBytes, [&](uint64_t offset, uint64_t bytes) {
        void* dst = a.f.error.ok() ? static_cast<void*>(a.f.pins[i].data() + offset) : scratch_;
        const ncclResult_t r = ncclRecv(dst, bytes, ncclInt8, /*peer=*/0, comm_, stream_);
        if (first_error == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first_error = r;
      });
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess) return NcclStatus(first_error, comm_, "queueing ncclRecv");
  if (end != ncclSuccess && end != ncclInProgress) {
    return NcclStatus(end, comm_, "queueing ncclRecv");
  }
  const int wait_ms = connected_ ? timeout_ms_ : SetupTimeoutMs(timeout_ms_);
  DQ_RETURN_IF_ERROR(WaitComm(
      comm_, Clock::now() + std::chrono::milliseconds(wait_ms), [this] { return Interrupted(); },
      "queueing ncclRecv"));
  connected_ = true;
  for (const Announced& a : batch) {
    if (a.f.done == nullptr) continue;
    DQ_NCCL_CUDA_RETURN_IF_ERROR(cudaEventRecord(a.f.done, stream_), "ordering a KV receive");
  }
  return absl::OkStatus();
}

absl::Status NcclInbound::Interrupted() const {
  if (WaitFd(wake_.fd(), -1, 0) == WaitResult::kReady) {
    return absl::CancelledError("the transport was shut down");
  }
  if (PeerHungUp(fd_.get())) return absl::UnavailableError("the sender hung up");
  return absl::OkStatus();
}

absl::Status NcclInbound::AckFinished() {
  while (!in_flight_.empty()) {
    InFlight& f = in_flight_.front();
    if (f.done != nullptr) {
      const cudaError_t e = cudaEventQuery(f.done);
      if (e == cudaErrorNotReady) return absl::OkStatus();
      if (e != cudaSuccess) return CudaStatus(e, "receiving KV");
      free_events_.push_back(f.done);
      f.done = nullptr;
    }
    last_progress_ = Clock::now();
    const uint64_t transfer = f.transfer;
    const absl::Status error = f.error;
    in_flight_.pop_front();  // unpins: the bytes are in, a ReleaseRegion may go ahead
    DQ_RETURN_IF_ERROR(SendAck(transfer, error));
  }
  return absl::OkStatus();
}

absl::Status NcclInbound::SendAck(uint64_t transfer, const absl::Status& status) {
  std::string message(status.message().substr(0, wire::kMaxMessageBytes));
  auto ack = wire::Encode(wire::AckHeader{transfer, static_cast<uint32_t>(status.code()),
                                          static_cast<uint32_t>(message.size())});
  std::string frame(ack.data(), ack.size());
  frame += message;
  return SendAll(fd_.get(), frame.data(), frame.size(), timeout_ms_, wake_.fd());
}

absl::Status NcclInbound::Scratch() {
  // One chunk's worth, allocated once and never freed while the connection lives: freeing it
  // would synchronize the device behind recvs that may still be writing into it.
  if (scratch_ != nullptr) return absl::OkStatus();
  DQ_NCCL_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&scratch_, kNcclChunkBytes),
      absl::StrCat("allocating ", kNcclChunkBytes, " bytes to drain a refused transfer into"));
  return absl::OkStatus();
}

void NcclInbound::Teardown() {
  shutdown(fd_.get(), SHUT_RDWR);
  // Recvs still queued would wait for a sender that is gone: abort them, and keep their target
  // ranges pinned (ReleaseRegion waits) until the stream has let go of them.
  AbortComm(comm_);
  comm_ = nullptr;
  if (stream_ != nullptr) {
    absl::Status idle =
        WaitStreamIdle(stream_, Clock::now() + std::chrono::milliseconds(timeout_ms_));
    if (!idle.ok()) SPDLOG_WARN("kvtransfer nccl: after aborting {}: {}", peer_, idle.ToString());
  }
  for (InFlight& f : in_flight_) {
    if (f.done != nullptr) free_events_.push_back(f.done);
  }
  in_flight_.clear();  // unpins the targets
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  free_events_.clear();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  if (scratch_ != nullptr) cudaFree(scratch_);
  scratch_ = nullptr;
}

}  // namespace dq::kvtransfer::nccl
