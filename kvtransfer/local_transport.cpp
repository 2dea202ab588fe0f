#include "kvtransfer/local_transport.h"

#include <unistd.h>

#include <cstring>

#include "common/status.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/region_table.h"

namespace dq::kvtransfer {
namespace {

// Every LocalTransport of the process shares one table: that is what lets a prefill engine and a
// decode engine in one process exchange descriptors.
RegionTable& ProcessRegions() {
  static RegionTable* table = new RegionTable();  // never destroyed: used until exit
  return *table;
}

}  // namespace

LocalTransport::~LocalTransport() {
  for (RegionId id : own_regions_) ProcessRegions().Remove(id).IgnoreError();
}

absl::StatusOr<RegionHandle> LocalTransport::RegisterRegion(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("RegisterRegion needs a non-null pointer and bytes > 0");
  }
  RegionHandle handle;
  const RegionTable::Registration r = ProcessRegions().Add(ptr, bytes);
  handle.id = r.id;
  handle.bytes = bytes;
  ByteWriter payload;
  payload.U64(static_cast<uint64_t>(getpid()));
  handle.descriptor = EncodeDescriptor({"local", r.id, bytes, payload.Take(), r.key});
  std::lock_guard lock(mu_);
  own_regions_.insert(handle.id);
  return handle;
}

absl::Status LocalTransport::ReleaseRegion(RegionId id) {
  {
    std::lock_guard lock(mu_);
    if (own_regions_.erase(id) == 0) {
      return absl::NotFoundError(absl::StrCat("region ", id, " is not registered here"));
    }
  }
  return ProcessRegions().Remove(id);
}

absl::StatusOr<RemoteRegionId> LocalTransport::Prepare(std::string_view descriptor) {
  DQ_ASSIGN_OR_RETURN(RegionDescriptor d, DecodeDescriptor(descriptor, "local"));
  ByteReader r(d.payload);
  uint64_t pid = r.U64();
  if (!r.ok() || pid != static_cast<uint64_t>(getpid())) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptor comes from process ", pid,
                     " but the local transport only works inside one "
                     "process (this is ",
                     getpid(), "); use the tcp or ucx transport across processes"));
  }
  // Inside one process the key is checked once, here: every later Post goes through this Remote.
  DQ_RETURN_IF_ERROR(ProcessRegions().CheckKey(d.region_id, d.key));
  std::lock_guard lock(mu_);
  RemoteRegionId id = next_id_++;
  remotes_[id] = Remote{d.region_id, d.bytes};
  return id;
}

absl::Status LocalTransport::ReleaseRemote(RemoteRegionId id) {
  std::lock_guard lock(mu_);
  if (remotes_.erase(id) == 0) {
    return absl::NotFoundError(absl::StrCat("remote region ", id, " is not prepared here"));
  }
  return absl::OkStatus();
}

absl::Status LocalTransport::Copy(RegionId local, RegionId remote, std::span<const CopyOp> copies) {
  RegionTable& table = ProcessRegions();
  for (const CopyOp& op : copies) {
    if (op.bytes == 0) continue;
    DQ_ASSIGN_OR_RETURN(PinnedRange src, PinRange(table, local, op.local_offset, op.bytes));
    DQ_ASSIGN_OR_RETURN(PinnedRange dst, PinRange(table, remote, op.remote_offset, op.bytes));
    std::memmove(dst.data(), src.data(), op.bytes);  // regions may overlap
  }
  return absl::OkStatus();
}

absl::StatusOr<TransferId> LocalTransport::Post(RegionId local, RemoteRegionId remote,
                                                std::span<const CopyOp> copies) {
  if (copies.empty()) return absl::InvalidArgumentError("Post needs at least one copy");
  Remote target;
  {
    std::lock_guard lock(mu_);
    if (own_regions_.count(local) == 0) {
      return absl::NotFoundError(absl::StrCat("local region ", local, " is not registered here"));
    }
    auto it = remotes_.find(remote);
    if (it == remotes_.end()) {
      return absl::NotFoundError(absl::StrCat("remote region ", remote, " is not prepared here"));
    }
    target = it->second;
  }
  DQ_ASSIGN_OR_RETURN(uint64_t local_bytes, ProcessRegions().Size(local));
  for (const CopyOp& op : copies) {
    DQ_RETURN_IF_ERROR(
        CheckRange(op.local_offset, op.bytes, local_bytes, absl::StrCat("local region ", local)));
    DQ_RETURN_IF_ERROR(CheckRange(op.remote_offset, op.bytes, target.bytes,
                                  absl::StrCat("remote region ", target.region)));
  }
  absl::Status copied = Copy(local, target.region, copies);
  std::lock_guard lock(mu_);
  TransferId id = next_id_++;
  finished_[id] = copied.ok() ? TransferStatus{TransferState::kDone, absl::OkStatus()}
                              : TransferStatus{TransferState::kFailed, copied};
  return id;
}

TransferStatus LocalTransport::Poll(TransferId id) {
  std::lock_guard lock(mu_);
  auto it = finished_.find(id);
  if (it == finished_.end()) {
    return {TransferState::kFailed,
            absl::NotFoundError(
                absl::StrCat("transfer ", id, " is unknown (already reported done or failed)"))};
  }
  TransferStatus status = it->second;
  finished_.erase(it);
  return status;
}

}  // namespace dq::kvtransfer
