#include "kvtransfer/tcp_transport.h"

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/descriptor.h"

namespace dq::kvtransfer {
namespace {

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> TcpTransport::Create(const TransportConfig& config) {
  std::string host =
      config.advertise_address.empty() ? config.bind_address : config.advertise_address;
  if (IsWildcard(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kvtransfer tcp binds to the wildcard address '", config.bind_address,
        "' but has no advertise_address; set advertise_address to the host or IP that peers "
        "should connect to"));
  }
  uint16_t port = 0;
  DQ_ASSIGN_OR_RETURN(Fd listener, Listen(config.bind_address, config.port, &port));
  std::string address = FormatHostPort({host, port});
  SPDLOG_DEBUG("kvtransfer tcp: listening on {} (bound to {})", address, config.bind_address);
  return std::unique_ptr<Transport>(new TcpTransport(config, std::move(listener), address));
}

TcpTransport::TcpTransport(const TransportConfig& config, Fd listener, std::string address)
    : config_(config), listener_(std::move(listener)), address_(std::move(address)) {
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TcpTransport::~TcpTransport() {
  wake_.Signal();
  acceptor_.join();
  std::map<std::string, std::shared_ptr<TcpOutbound>> peers;
  std::vector<std::unique_ptr<TcpInbound>> inbound;
  {
    std::lock_guard lock(mu_);
    peers.swap(peers_);
    inbound.swap(inbound_);
  }
  peers.clear();    // fails what is still in flight (Cancelled) and joins the senders
  inbound.clear();  // joins the receivers
}

void TcpTransport::AcceptLoop() {
  for (;;) {
    if (WaitFd(listener_.get(), wake_.fd(), -1) == WaitResult::kWoken) return;
    std::string peer;
    absl::StatusOr<Fd> fd = Accept(listener_.get(), &peer);
    if (!fd.ok()) {
      SPDLOG_WARN("kvtransfer tcp: {}", std::string(fd.status().message()));
      continue;
    }
    auto conn =
        std::make_unique<TcpInbound>(std::move(*fd), peer, &regions_, config_.io_timeout_ms);
    std::vector<std::unique_ptr<TcpInbound>> done;
    std::lock_guard lock(mu_);
    for (auto& c : inbound_) {
      if (c->finished()) done.push_back(std::move(c));
    }
    std::erase(inbound_, nullptr);
    inbound_.push_back(std::move(conn));
  }
}

absl::StatusOr<RegionHandle> TcpTransport::RegisterRegion(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion needs a non-null pointer and bytes > 0");
  }
  RegionHandle handle;
  const RegionTable::Registration r = regions_.Add(ptr, bytes);
  handle.id = r.id;
  handle.bytes = bytes;
  handle.descriptor = EncodeDescriptor({"tcp", r.id, bytes, address_, r.key});
  return handle;
}

absl::Status TcpTransport::ReleaseRegion(RegionId id) { return regions_.Remove(id); }

absl::StatusOr<std::shared_ptr<TcpOutbound>> TcpTransport::Peer(const std::string& peer) {
  std::shared_ptr<TcpOutbound> stale;  // destroyed (threads joined) outside the lock
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end() && !it->second->broken()) return it->second;
  }
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<TcpOutbound> conn,
                      TcpOutbound::Connect(peer, config_.io_timeout_ms));
  std::lock_guard lock(mu_);
  std::shared_ptr<TcpOutbound>& slot = peers_[peer];
  // Another thread may have reconnected meanwhile; keep one connection per peer.
  if (slot != nullptr && !slot->broken()) return slot;
  stale = std::exchange(slot, conn);
  return conn;
}

absl::StatusOr<RemoteRegionId> TcpTransport::Prepare(std::string_view descriptor) {
  DQ_ASSIGN_OR_RETURN(RegionDescriptor d, DecodeDescriptor(descriptor, "tcp"));
  DQ_RETURN_IF_ERROR(ParseHostPort(d.payload).status());
  // Connect now so that an unreachable receiver fails the lease here, not mid-prefill.
  DQ_RETURN_IF_ERROR(Peer(d.payload).status());
  std::lock_guard lock(mu_);
  RemoteRegionId id = next_id_++;
  remotes_[id] = Remote{d.payload, d.region_id, d.bytes, d.key};
  return id;
}

absl::Status TcpTransport::ReleaseRemote(RemoteRegionId id) {
  std::lock_guard lock(mu_);
  if (remotes_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("remote region ", id, " is not prepared here"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TcpTransfer>> TcpTransport::MakeTransfer(
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
  auto t = std::make_shared<TcpTransfer>();
  t->remote_region = remote.region;
  t->remote_key = remote.key;
  t->ops.assign(copies.begin(), copies.end());
  for (const CopyOp& op : copies) {
    DQ_ASSIGN_OR_RETURN(PinnedRange pin, PinRange(regions_, local, op.local_offset, op.bytes));
    t->sources.push_back(std::move(pin));
  }
  return t;
}

absl::StatusOr<TransferId> TcpTransport::Post(RegionId local, RemoteRegionId remote,
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
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<TcpTransfer> t, MakeTransfer(local, target, copies));
  DQ_ASSIGN_OR_RETURN(std::shared_ptr<TcpOutbound> conn, Peer(target.peer));
  const TransferId id = transfers_.Add(t);
  conn->Enqueue(std::move(t));
  return id;
}

TransferStatus TcpTransport::Poll(TransferId id) { return transfers_.Poll(id); }

}  // namespace dq::kvtransfer
