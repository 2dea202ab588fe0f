#include "kvtransfer/nccl_transport.h"

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/nccl_wire.h"
#include "kvtransfer/tcp_wire.h"

namespace dq::kvtransfer {
namespace {

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

absl::StatusOr<int> ResolveDevice(int wanted) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the nccl kvtransfer backend needs a CUDA device, but none is usable (",
                     e != cudaSuccess ? cudaGetErrorString(e) : "none found",
                     "); check the driver and CUDA_VISIBLE_DEVICES, or use the tcp transport"));
  }
  int device = wanted;
  if (device < 0) {
    DQ_NCCL_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "reading the current CUDA device");
  }
  if (device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("the nccl kvtransfer backend was given cuda:", device,
                     " but this process sees ", count, " CUDA device(s)"));
  }
  return device;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(const TransportConfig& config) {
  const std::string host =
      config.advertise_address.empty() ? config.bind_address : config.advertise_address;
  if (IsWildcard(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kvtransfer nccl binds its control listener to the wildcard address '", config.bind_address,
        "' but has no advertise_address; set advertise_address to the host "
        "or IP that peers should connect to"));
  }
  DQ_ASSIGN_OR_RETURN(int device, ResolveDevice(config.cuda_device));
  DQ_ASSIGN_OR_RETURN(std::string bus_id, nccl::PciBusId(device));
  uint16_t port = 0;
  DQ_ASSIGN_OR_RETURN(Fd listener, Listen(config.bind_address, config.port, &port));
  std::string address = FormatHostPort({host, port});
  SPDLOG_DEBUG("kvtransfer nccl: cuda:{} ({}), control listener on {}", device, bus_id, address);
  return std::unique_ptr<Transport>(
      new NcclTransport(config, device, std::move(bus_id), std::move(listener), address));
}

NcclTransport::NcclTransport(const TransportConfig& config, int device, std::string bus_id,
                             Fd listener, std::string address)
    : config_(config),
      device_(device),
      bus_id_(std::move(bus_id)),
      listener_(std::move(listener)),
      address_(std::move(address)) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

NcclTransport::~NcclTransport() {
  wake_.Signal();
  acceptor_.join();
  std::map<std::string, std::shared_ptr<nccl::NcclOutbound>> peers;
  std::vector<std::unique_ptr<nccl::NcclInbound>> inbound;
  {
    std::lock_guard lock(mu_);
    peers.swap(peers_);
    inbound.swap(inbound_);
  }
  peers.clear();    // fails what is in flight (Cancelled), aborts the communicators
  inbound.clear();  // aborts the receiving communicators, joins
}

void NcclTransport::AcceptLoop() {
  for (;;) {
    if (WaitFd(listener_.get(), wake_.fd(), -1) == WaitResult::kWoken) return;
    std::string peer;
    absl::StatusOr<Fd> fd = Accept(listener_.get(), &peer);
    if (!fd.ok()) {
      SPDLOG_WARN("kvtransfer nccl: {}", std::string(fd.status().message()));
      continue;
    }
    auto conn = std::make_unique<nccl::NcclInbound>(std::move(*fd), peer, &regions_, device_,
                                                    bus_id_, config_.io_timeout_ms);
    std::vector<std::unique_ptr<nccl::NcclInbound>> done;  // joined outside the lock
    std::lock_guard lock(mu_);
    for (auto& c : inbound_) {
      if (c->finished()) done.push_back(std::move(c));
    }
    std::erase(inbound_, nullptr);
    inbound_.push_back(std::move(conn));
  }
}

absl::StatusOr<RegionHandle> NcclTransport::RegisterRegion(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion needs a non-null pointer and bytes > 0");
  }
  DQ_RETURN_IF_ERROR(nccl::CheckDeviceRange(ptr, bytes, device_));
  RegionHandle handle;
  const RegionTable::Registration r = regions_.Add(ptr, bytes);
  handle.id = r.id;
  handle.bytes = bytes;
  handle.descriptor = EncodeDescriptor(
      {"nccl", r.id, bytes, EncodeNcclPayload({address_, static_cast<int32_t>(device_)}), r.key});
  return handle;
}

absl::Status NcclTransport::ReleaseRegion(RegionId id) { return regions_.Remove(id); }

absl::StatusOr<std::shared_ptr<nccl::NcclOutbound>> NcclTransport::Peer(const Remote& remote) {
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(remote.peer);
    if (it != peers_.end() && !it->second->broken()) return it->second;
  }
  std::lock_guard connecting(connect_mu_);
  std::shared_ptr<nccl::NcclOutbound> stale;  // destroyed (thread joined) outside mu_
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(remote.peer);
    if (it != peers_.end() && !it->second->broken()) return it->second;
  }
  DQ_ASSIGN_OR_RETURN(
      std::shared_ptr<nccl::NcclOutbound> conn,
      nccl::NcclOutbound::Connect(remote.peer, device_, remote.cuda_device, config_.io_timeout_ms));
  std::lock_guard lock(mu_);
  stale = std::exchange(peers_[remote.peer], conn);
  return conn;
}

absl::StatusOr<RemoteRegionId> NcclTransport::Prepare(std::string_view descriptor) {
  DQ_ASSIGN_OR_RETURN(RegionDescriptor d, DecodeDescriptor(descriptor, "nccl"));
  DQ_ASSIGN_OR_RETURN(NcclPayload payload, DecodeNcclPayload(d.payload));
  Remote remote{payload.control, payload.cuda_device, d.region_id, d.bytes, d.key};
  // Connect (and bring the communicator up) now, so that an unreachable receiver fails the
  // lease here, not in the middle of a prefill.
  DQ_RETURN_IF_ERROR(Peer(remote).status());
  std::lock_guard lock(mu_);
  RemoteRegionId id = next_id_++;
  remotes_[id] = std::move(remote);
  return id;
}

absl::Status NcclTransport::ReleaseRemote(RemoteRegionId id) {
  std::lock_guard lock(mu_);
  if (remotes_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("remote region ", id, " is not prepared here"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<nccl::Transfer>> NcclTransport::MakeTransfer(
    RegionId local, const Remote& remote, std::span<const CopyOp> copies) {
  if (copies.empty()) return absl::InvalidArgumentError("Post needs at least one copy");
  if (copies.size() > wire::kMaxOps) {
    return absl::InvalidArgumentError(absl::StrCat("Post got ", copies.size(), " copies; at most ",
                                                   wire::kMaxOps, " fit one transfer"));
  }
  DQ_ASSIGN_OR_RETURN(uint64_t local_bytes, regions_.Size(local));
  for (const CopyOp& op : copies) {
    DQ_RETURN_IF_ERROR(
        CheckRange(op.local_offset, op.bytes, local_bytes, absl::StrCat("local region ", local)));
    DQ_RETURN_IF_ERROR(
        CheckRange(op.remote_offset, op.bytes, remote.bytes,
                   absl::StrCat("remote region ", remote.region, " at ", remote.peer)));
  }
  auto t = std::make_shared<nccl::Transfer>();
  t->remote_region = remote.region;
  t->remote_key = remote.key;
  t->ops = nccl::MergeAdjacentCopies(copies);
  for (const CopyOp& op : t->ops) {
    DQ_ASSIGN_OR_RETURN(PinnedRange pin, PinRange(regions_, local, op.local_offset, op.bytes));
    t->sources.push_back(std::move(pin));
  }
  return t;
}

absl::StatusOr<TransferId> NcclTransport::Post(RegionId local, RemoteRegionId remote,
                                               std::span<const CopyOp> copies) {
  Remote target;
  {
    std::lock_guard lock(mu_);
    auto it = remotes_.find(remote);
    if (it == remotes_.end()) {
      return absl::NotFoundError(absl::StrCat("remote region ", remote, " is not prepared here"));
    }
    target = it->second;
  }
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<nccl::Transfer> t, MakeTransfer(local, target, copies));
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<nccl::NcclOutbound> conn, Peer(target));
  const TransferId id = transfers_.Add(t);
  conn->Enqueue(std::move(t));
  return id;
}

TransferStatus NcclTransport::Poll(TransferId id) { return transfers_.Poll(id); }

}  // namespace dq::kvtransfer
