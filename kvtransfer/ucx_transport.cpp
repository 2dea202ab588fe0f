#include "kvtransfer/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "kvtransfer/cuda_memory.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/nccl_wire.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/ucx_runtime.h"

namespace dq::kvtransfer {
namespace {

using Clock = std::chrono::steady_clock;

std::string UcsText(ucs_status_t status) { return std::string(ucs_status_string(status)); }

// An endpoint to one remote worker, shared by every remote region of that worker.
struct UcxPeer {
  ucp_ep_h ep = nullptr;
  ucs_status_t failure = UCS_OK;  // set by the endpoint error callback
  bool closed = false;
};

struct UcxRemote {
  UcxPeer* peer = nullptr;
  ucp_rkey_h rkey = nullptr;
  uint64_t base = 0;  // the region's address in the peer's address space
  uint64_t bytes = 0;
  RegionId region = 0;
  int inflight = 0;  // transfers whose puts may still use rkey
  bool released = false;
};

struct UcxTransfer {
  UcxPeer* peer = nullptr;
  RemoteRegionId remote = 0;
  void* flush = nullptr;  // the endpoint flush request; null once complete
  Clock::time_point deadline;
  std::vector<PinnedRange> sources;  // one per (merged) copy, held until the flush completes
  TransferStatus status;             // what Poll reports
  bool forgotten = false;            // Poll reported it; erase once `flush` completes
};

// A registered region: its UCX memory handle and whether it is CUDA device memory.
struct UcxMapping {
  ucp_mem_h memh = nullptr;
  bool device = false;
};

// Runs inside ucp_worker_progress, which only ever runs under State::mu.
void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  static_cast<UcxPeer*>(arg)->failure = status;
}

}  // namespace

struct UcxTransport::State {
  TransportConfig config;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string worker_address;
  // Device regions are allowed: the loaded UCX can register and move CUDA memory, this build has
  // CUDA, and config.cuda_device names the device (the worker keeps its KV on a GPU).
  bool cuda_memory = false;
  std::string runtime;  // which UCX, and whether it has CUDA (logs and errors)

  // Guards everything below and every UCX call (the worker is created SERIALIZED).
  std::mutex mu;
  RegionTable regions;
  std::map<RegionId, UcxMapping> mappings;
  std::map<std::string, std::unique_ptr<UcxPeer>> peers;  // live endpoints by worker address
  std::vector<std::unique_ptr<UcxPeer>> dead_peers;  // closed, kept while remotes point at them
  std::map<RemoteRegionId, UcxRemote> remotes;
  std::map<TransferId, UcxTransfer> transfers;
  uint64_t next_id = 1;
  std::atomic<bool> stop{false};

  ~State();
  absl::Status Init();
  absl::StatusOr<UcxPeer*> PeerFor(const std::string& address);
  void ClosePeer(UcxPeer* peer, const absl::Status& why);
  void WaitRequest(void* request);
  // Progresses the worker and settles finished transfers; returns UCX's event count.
  unsigned Progress();
  void Settle(UcxTransfer& t, Clock::time_point now);
  void FinishRequest(UcxTransfer& t, ucs_status_t status);
  void DropRemoteIfUnused(RemoteRegionId id);
  void IssuePuts(UcxTransfer& t, UcxRemote& remote, const UcxMapping& local,
                 std::span<const CopyOp> copies);
  // The device UCX calls of this transport run on (-1: none, host memory only).
  int Device() const { return cuda_memory ? config.cuda_device : -1; }
};

absl::Status UcxTransport::State::Init() {
  const UcxRuntime loaded = LoadedUcx();
  DQ_RETURN_IF_ERROR(CheckUcxAbi(loaded));
  // UCX's CUDA transports bind to the current device's context when they start.
  ScopedCudaDevice bind(BuiltWithCuda() ? config.cuda_device : -1);
  ucp_config_t* ucp_config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &ucp_config);
  if (s == UCS_OK && !config.ucx_transports.empty()) {
    s = ucp_config_modify(ucp_config, "TLS", config.ucx_transports.c_str());
  }
  if (s == UCS_OK) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    s = ucp_init(&params, ucp_config, &context);
  }
  if (ucp_config != nullptr) ucp_config_release(ucp_config);
  if (s != UCS_OK) {
    return absl::UnavailableError(
        absl::StrCat("UCX could not start (", UcsText(s), ") with UCX_TLS='", config.ucx_transports,
                     "' (", DescribeUcx(loaded),
                     "); run `ucx_info -d` to see the transports here, or use the tcp kvtransfer"));
  }
  // The context lists the memory types its transports can register: CUDA only where UCX was
  // built with CUDA and its cuda module loaded (it needs libcuda, i.e. a GPU driver).
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  const bool ucx_cuda = ucp_context_query(context, &attr) == UCS_OK &&
                        (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  cuda_memory = ucx_cuda && BuiltWithCuda() && config.cuda_device >= 0;
  runtime = absl::StrCat(
      DescribeUcx(loaded), ", CUDA memory: ",
      ucx_cuda ? "yes" : "no (no CUDA transport loaded: a UCX without CUDA, or no GPU driver)");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(context, &wp, &worker);
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  if (s == UCS_OK) s = ucp_worker_get_address(worker, &address, &address_bytes);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat("UCX worker could not start: ", UcsText(s)));
  }
  worker_address.assign(reinterpret_cast<const char*>(address), address_bytes);
  ucp_worker_release_address(worker, address);
  return absl::OkStatus();
}

UcxTransport::State::~State() {
  ScopedCudaDevice bind(Device());
  if (worker != nullptr) {
    // rkeys go before their endpoints (UCX's rule) where no put may still use them.
    for (auto& [id, remote] : remotes) {
      if (remote.peer->closed || remote.inflight > 0) continue;
      ucp_rkey_destroy(remote.rkey);
      remote.rkey = nullptr;
    }
    std::vector<UcxPeer*> live;
    for (auto& [address, peer] : peers) live.push_back(peer.get());
    for (UcxPeer* peer : live) ClosePeer(peer, absl::CancelledError("the transport was shut down"));
    for (auto& [id, t] : transfers) {
      if (t.flush != nullptr) WaitRequest(t.flush);
    }
    // Endpoints are closed: the remaining rkeys belong to cancelled transfers.
    for (auto& [id, remote] : remotes) {
      if (remote.rkey != nullptr) ucp_rkey_destroy(remote.rkey);
    }
    for (auto& [id, mapping] : mappings) ucp_mem_unmap(context, mapping.memh);
    ucp_worker_destroy(worker);
  }
  if (context != nullptr) ucp_cleanup(context);
}

absl::StatusOr<UcxPeer*> UcxTransport::State::PeerFor(const std::string& address) {
  auto it = peers.find(address);
  if (it != peers.end()) {
    if (it->second->failure == UCS_OK) return it->second.get();
    ClosePeer(it->second.get(), absl::UnavailableError(UcsText(it->second->failure)));
  }
  auto peer = std::make_unique<UcxPeer>();
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  // Peer error handling: a dead receiver fails our requests instead of leaving them pending.
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = peer.get();
  ucs_status_t s = ucp_ep_create(worker, &params, &peer->ep);
  if (s != UCS_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a UCX endpoint to the kvtransfer receiver: ", UcsText(s),
                     "; both workers need a common UCX transport (check UCX_TLS on both)"));
  }
  UcxPeer* raw = peer.get();
  peers[address] = std::move(peer);
  return raw;
}

void UcxTransport::State::WaitRequest(void* request) {
  // Only used on teardown paths whose requests complete without the network (forced closes and
  // what they cancel), so this is short; bounded anyway, because hanging a worker on shutdown
  // is worse than leaking one request.
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(config.io_timeout_ms);
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    if (Clock::now() > deadline) {
      SPDLOG_ERROR(
          "kvtransfer ucx: a UCX request did not complete within {} ms of a forced "
          "close; leaking it",
          config.io_timeout_ms);
      return;
    }
    ucp_worker_progress(worker);
  }
  ucp_request_free(request);
}

void UcxTransport::State::ClosePeer(UcxPeer* peer, const absl::Status& why) {
  if (peer->closed) return;
  peer->closed = true;
  for (auto& [id, t] : transfers) {
    if (t.peer == peer && t.status.state == TransferState::kPending) {
      t.status = {TransferState::kFailed,
                  absl::Status(why.code(), absl::StrCat("UCX kv transfer failed: ", why.message(),
                                                        "; the decode worker may have exited: "
                                                        "release the lease and retry"))};
    }
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;  // cancels outstanding puts instead of flushing them
  ucs_status_ptr_t close = ucp_ep_close_nbx(peer->ep, &param);
  if (UCS_PTR_IS_PTR(close)) WaitRequest(close);
  for (auto it = peers.begin(); it != peers.end(); ++it) {
    if (it->second.get() == peer) {
      dead_peers.push_back(std::move(it->second));
      peers.erase(it);
      break;
    }
  }
}

void UcxTransport::State::FinishRequest(UcxTransfer& t, ucs_status_t status) {
  if (t.flush != nullptr) ucp_request_free(t.flush);
  t.flush = nullptr;
  t.sources.clear();
  if (t.status.state == TransferState::kPending) {
    t.status = status == UCS_OK
                   ? TransferStatus{TransferState::kDone, absl::OkStatus()}
                   : TransferStatus{TransferState::kFailed,
                                    absl::UnavailableError(absl::StrCat(
                                        "UCX kv transfer failed: ", UcsText(status),
                                        "; the decode worker may have exited: release the lease "
                                        "and retry"))};
  }
  auto remote = remotes.find(t.remote);
  if (remote != remotes.end()) {
    --remote->second.inflight;
    DropRemoteIfUnused(t.remote);
  }
}

void UcxTransport::State::Settle(UcxTransfer& t, Clock::time_point now) {
  if (t.flush == nullptr) return;
  ucs_status_t s = ucp_request_check_status(t.flush);
  if (s != UCS_INPROGRESS) {
    FinishRequest(t, s);
  } else if (t.peer->failure != UCS_OK) {
    ClosePeer(t.peer, absl::UnavailableError(UcsText(t.peer->failure)));
  } else if (now > t.deadline) {
    ClosePeer(t.peer, absl::DeadlineExceededError(
                          absl::StrCat("not complete after ", config.io_timeout_ms, " ms")));
  }
}

unsigned UcxTransport::State::Progress() {
  unsigned events = 0;
  for (unsigned n; (n = ucp_worker_progress(worker)) != 0;) events += n;
  const Clock::time_point now = Clock::now();
  for (auto it = transfers.begin(); it != transfers.end();) {
    Settle(it->second, now);
    if (it->second.forgotten && it->second.flush == nullptr) {
      it = transfers.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [address, peer] : peers) {
    if (peer->failure != UCS_OK) {
      ClosePeer(peer.get(), absl::UnavailableError(UcsText(peer->failure)));
      break;  // ClosePeer edited `peers`; the next round closes any other failed peer
    }
  }
  return events;
}

void UcxTransport::State::DropRemoteIfUnused(RemoteRegionId id) {
  auto it = remotes.find(id);
  if (it == remotes.end() || !it->second.released || it->second.inflight > 0) return;
  ucp_rkey_destroy(it->second.rkey);
  remotes.erase(it);
}

absl::StatusOr<std::unique_ptr<Transport>> UcxTransport::Create(const TransportConfig& config) {
  auto state = std::make_unique<State>();
  state->config = config;
  DQ_RETURN_IF_ERROR(state->Init());
  if (config.cuda_device >= 0) {
    // A GPU worker: say whether its KV moves device to device or through host staging.
    SPDLOG_INFO("kvtransfer ucx: {}; device regions on cuda:{}: {}", state->runtime,
                config.cuda_device,
                state->cuda_memory ? "yes" : "no, KV goes through pinned host staging");
  }
  return std::unique_ptr<Transport>(new UcxTransport(std::move(state)));
}

UcxTransport::UcxTransport(std::unique_ptr<State> state) : state_(std::move(state)) {
  progress_ = std::thread([this] { ProgressLoop(); });
}

UcxTransport::~UcxTransport() {
  state_->stop.store(true);
  progress_.join();
}

void UcxTransport::ProgressLoop() {
  // Polls with a backoff from 20 us to 1 ms when idle: simpler and more portable than UCX's
  // wakeup feature (which not every transport supports), at the cost of a little idle CPU.
  ScopedCudaDevice bind(state_->Device());
  auto idle = std::chrono::microseconds(20);
  while (!state_->stop.load()) {
    unsigned events;
    {
      std::lock_guard lock(state_->mu);
      events = state_->Progress();
    }
    if (events > 0) {
      idle = std::chrono::microseconds(20);
      continue;
    }
    std::this_thread::sleep_for(idle);
    idle = std::min(idle * 2, std::chrono::microseconds(1000));
  }
}

absl::StatusOr<RegionHandle> UcxTransport::RegisterRegion(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion needs a non-null pointer and bytes > 0");
  }
  // Only a GPU worker's transport asks CUDA (a CPU worker must not create a CUDA context).
  MemoryLocation where;
  if (state_->config.cuda_device >= 0) {
    DQ_ASSIGN_OR_RETURN(where, LocateMemory(ptr, bytes));
  }
  if (where.device && !state_->cuda_memory) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ucx kvtransfer cannot register CUDA device memory with the loaded ", state_->runtime,
        "; load UCX built with CUDA (kvtransfer/README.md, \"UCX with CUDA\") or stage the KV "
        "through pinned host memory"));
  }
  if (where.device && where.cuda_device != state_->config.cuda_device) {
    return absl::InvalidArgumentError(
        absl::StrCat("the region is memory of cuda:", where.cuda_device,
                     " but this ucx transport works on cuda:", state_->config.cuda_device,
                     " (TransportConfig::cuda_device)"));
  }
  std::lock_guard lock(state_->mu);
  ScopedCudaDevice bind(state_->Device());
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = ptr;
  params.length = bytes;
  if (where.device) {
    params.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    params.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  ucp_mem_h memh = nullptr;
  ucs_status_t s = ucp_mem_map(state_->context, &params, &memh);
  void* rkey = nullptr;
  size_t rkey_bytes = 0;
  if (s == UCS_OK) s = ucp_rkey_pack(state_->context, memh, &rkey, &rkey_bytes);
  if (s != UCS_OK) {
    if (memh != nullptr) ucp_mem_unmap(state_->context, memh);
    return absl::UnavailableError(
        absl::StrCat("UCX cannot register ", bytes,
                     where.device ? " bytes of device memory: " : " bytes: ", UcsText(s),
                     where.device ? absl::StrCat(" (", state_->runtime, ")")
                                  : "; check the locked-memory limit (ulimit -l)"));
  }
  ByteWriter payload;
  payload.Str(state_->worker_address);
  payload.U64(reinterpret_cast<uint64_t>(ptr));
  payload.Str(std::string_view(static_cast<const char*>(rkey), rkey_bytes));
  ucp_rkey_buffer_release(rkey);
  RegionHandle handle;
  // One-sided puts never reach this side's code: the packed rkey is what grants the write, and
  // the region key rides along unchecked (the envelope is the same for every backend).
  const RegionTable::Registration r = state_->regions.Add(ptr, bytes);
  handle.id = r.id;
  handle.bytes = bytes;
  handle.descriptor = EncodeDescriptor({"ucx", r.id, bytes, payload.Take(), r.key});
  state_->mappings[handle.id] = UcxMapping{memh, where.device};
  return handle;
}

absl::Status UcxTransport::ReleaseRegion(RegionId id) {
  // Wait for our own transfers reading it without holding the lock: they finish in Progress.
  DQ_RETURN_IF_ERROR(state_->regions.Remove(id));
  std::lock_guard lock(state_->mu);
  ScopedCudaDevice bind(state_->Device());
  auto it = state_->mappings.find(id);
  if (it != state_->mappings.end()) {
    ucp_mem_unmap(state_->context, it->second.memh);
    state_->mappings.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<RemoteRegionId> UcxTransport::Prepare(std::string_view descriptor) {
  DQ_ASSIGN_OR_RETURN(RegionDescriptor d, DecodeDescriptor(descriptor, "ucx"));
  ByteReader r(d.payload);
  std::string address(r.Str());
  uint64_t base = r.U64();
  std::string rkey_buffer(r.Str());
  if (!r.ok() || address.empty() || rkey_buffer.empty()) {
    return absl::InvalidArgumentError(
        "ucx region descriptor payload is malformed; pass RegionHandle::descriptor unchanged");
  }
  std::lock_guard lock(state_->mu);
  ScopedCudaDevice bind(state_->Device());
  DQ_ASSIGN_OR_RETURN(UcxPeer * peer, state_->PeerFor(address));
  ucp_rkey_h rkey = nullptr;
  ucs_status_t s = ucp_ep_rkey_unpack(peer->ep, rkey_buffer.data(), &rkey);
  if (s != UCS_OK) {
    return absl::UnavailableError(absl::StrCat(
        "cannot unpack the receiver's UCX remote key: ", UcsText(s),
        "; no common UCX transport can write the receiver's memory (check UCX_TLS on both)"));
  }
  RemoteRegionId id = state_->next_id++;
  state_->remotes[id] = UcxRemote{peer, rkey, base, d.bytes, d.region_id, 0, false};
  return id;
}

absl::Status UcxTransport::ReleaseRemote(RemoteRegionId id) {
  std::lock_guard lock(state_->mu);
  auto it = state_->remotes.find(id);
  if (it == state_->remotes.end() || it->second.released) {
    return absl::NotFoundError(absl::StrCat("remote region ", id, " is not prepared here"));
  }
  it->second.released = true;
  state_->DropRemoteIfUnused(id);  // or later, when its last transfer's flush completes
  return absl::OkStatus();
}

void UcxTransport::State::IssuePuts(UcxTransfer& t, UcxRemote& remote, const UcxMapping& local,
                                    std::span<const CopyOp> copies) {
  ucp_request_param_t param{};
  if (local.device) {
    // Say what the source is instead of letting UCX look it up per put (its memory type cache
    // misses memory allocated before UCX started).
    param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memh = local.memh;
    param.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].bytes == 0) continue;
    ucs_status_ptr_t put = ucp_put_nbx(remote.peer->ep, t.sources[i].data(), copies[i].bytes,
                                       remote.base + copies[i].remote_offset, remote.rkey, &param);
    if (UCS_PTR_IS_ERR(put)) {
      // Earlier puts may be in flight: keep going to the flush, which waits for them.
      t.status = {TransferState::kFailed,
                  absl::UnavailableError(
                      absl::StrCat("ucp_put_nbx failed: ", UcsText(UCS_PTR_STATUS(put))))};
      break;
    }
    // Freed now, completed by the flush below; the flush is what we track.
    if (UCS_PTR_IS_PTR(put)) ucp_request_free(put);
  }
  ucp_request_param_t flush_param{};
  ucs_status_ptr_t flush = ucp_ep_flush_nbx(remote.peer->ep, &flush_param);
  ++remote.inflight;
  if (UCS_PTR_IS_PTR(flush)) {
    t.flush = flush;
  } else {
    FinishRequest(t, UCS_PTR_STATUS(flush));
  }
}

absl::StatusOr<TransferId> UcxTransport::Post(RegionId local, RemoteRegionId remote,
                                              std::span<const CopyOp> copies) {
  if (copies.empty()) return absl::InvalidArgumentError("Post needs at least one copy");
  std::lock_guard lock(state_->mu);
  auto it = state_->remotes.find(remote);
  if (it == state_->remotes.end() || it->second.released) {
    return absl::NotFoundError(absl::StrCat("remote region ", remote, " is not prepared here"));
  }
  UcxRemote& target = it->second;
  if (target.peer->closed || target.peer->failure != UCS_OK) {
    return absl::UnavailableError(
        "the UCX endpoint to this receiver failed earlier; Prepare its descriptor again to "
        "reconnect (or reserve a new lease)");
  }
  DQ_ASSIGN_OR_RETURN(uint64_t local_bytes, state_->regions.Size(local));
  for (const CopyOp& op : copies) {
    DQ_RETURN_IF_ERROR(
        CheckRange(op.local_offset, op.bytes, local_bytes, absl::StrCat("local region ", local)));
    DQ_RETURN_IF_ERROR(CheckRange(op.remote_offset, op.bytes, target.bytes,
                                  absl::StrCat("remote region ", target.region)));
  }
  // Fewer, larger puts: adjacent block runs become one put (one cudaMemcpy for cuda_ipc).
  const std::vector<CopyOp> merged = nccl::MergeAdjacentCopies(copies);
  UcxTransfer t;
  for (const CopyOp& op : merged) {
    DQ_ASSIGN_OR_RETURN(PinnedRange pin,
                        PinRange(state_->regions, local, op.local_offset, op.bytes));
    t.sources.push_back(std::move(pin));
  }
  t.peer = target.peer;
  t.remote = remote;
  t.deadline = Clock::now() + std::chrono::milliseconds(state_->config.io_timeout_ms);
  TransferId id = state_->next_id++;
  UcxTransfer& placed = state_->transfers[id] = std::move(t);
  ScopedCudaDevice bind(state_->Device());
  state_->IssuePuts(placed, target, state_->mappings.at(local), merged);
  return id;
}

bool UcxTransport::supports_device_memory() const { return state_->cuda_memory; }

const std::string& UcxTransport::runtime() const { return state_->runtime; }

std::string UcxTransport::DescribeEndpoints() {
  std::lock_guard lock(state_->mu);
  char* text = nullptr;
  size_t bytes = 0;
  FILE* out = open_memstream(&text, &bytes);
  if (out == nullptr) return "";
  for (auto& [address, peer] : state_->peers) ucp_ep_print_info(peer->ep, out);
  std::fclose(out);
  std::string description(text, bytes);
  std::free(text);
  return description;
}

TransferStatus UcxTransport::Poll(TransferId id) {
  std::lock_guard lock(state_->mu);
  ScopedCudaDevice bind(state_->Device());
  state_->Progress();
  auto it = state_->transfers.find(id);
  if (it == state_->transfers.end() || it->second.forgotten) {
    return {TransferState::kFailed,
            absl::NotFoundError(
                absl::StrCat("transfer ", id, " is unknown (already reported done or failed)"))};
  }
  TransferStatus status = it->second.status;
  if (status.state != TransferState::kPending) {
    if (it->second.flush == nullptr) {
      state_->transfers.erase(it);
    } else {
      it->second.forgotten = true;  // a forced close is cancelling its puts; erased after that
    }
  }
  return status;
}

}  // namespace dq::kvtransfer
