#include "kvtransfer/region_table.h"

#include <atomic>

#include "common/random_token.h"
#include "common/status.h"

namespace dq::kvtransfer {
namespace {

std::atomic<RegionId> next_region_id{1};

}  // namespace

absl::Status CheckRange(uint64_t offset, uint64_t bytes, uint64_t size, std::string_view what) {
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "copy of ", bytes, " bytes at offset ", offset, " does not fit in ", std::string(what),
        " (", size, " bytes); check the block runs and layer strides against the KV lease"));
  }
  return absl::OkStatus();
}

RegionTable::Registration RegionTable::Add(void* base, uint64_t bytes) {
  Registration r;
  r.id = next_region_id.fetch_add(1);
  RandomBytes(r.key);
  std::lock_guard lock(mu_);
  regions_[r.id] = Region{static_cast<std::byte*>(base), bytes, 0, false, r.key};
  return r;
}

absl::Status RegionTable::CheckKey(RegionId id, const RegionKey& key) const {
  std::lock_guard lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.removing) {
    return absl::NotFoundError(absl::StrCat(
        "region ", id, " is not registered (released, or its lease expired); reserve a new lease"));
  }
  uint8_t diff = 0;  // every byte compared: the time taken says nothing about the key
  for (size_t i = 0; i < key.size(); ++i) diff |= key[i] ^ it->second.key[i];
  if (diff != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("the write into region ", id,
                     " carries another region's key; only the holder of the "
                     "region's descriptor (its KV lease) may write there"));
  }
  return absl::OkStatus();
}

absl::Status RegionTable::Remove(RegionId id) {
  std::unique_lock lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.removing) {
    return absl::NotFoundError(absl::StrCat("region ", id, " is not registered here"));
  }
  it->second.removing = true;
  unpinned_.wait(lock, [&] { return it->second.pins == 0; });
  regions_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::byte*> RegionTable::Pin(RegionId id, uint64_t offset, uint64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.removing) {
    return absl::NotFoundError(absl::StrCat(
        "region ", id, " is not registered (released, or its lease expired); reserve a new lease"));
  }
  DQ_RETURN_IF_ERROR(CheckRange(offset, bytes, it->second.bytes, absl::StrCat("region ", id)));
  ++it->second.pins;
  return it->second.base + offset;
}

void RegionTable::Unpin(RegionId id) {
  std::lock_guard lock(mu_);
  auto it = regions_.find(id);
  if (it != regions_.end() && --it->second.pins == 0) unpinned_.notify_all();
}

absl::StatusOr<uint64_t> RegionTable::Size(RegionId id) const {
  std::lock_guard lock(mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.removing) {
    return absl::NotFoundError(absl::StrCat("region ", id, " is not registered here"));
  }
  return it->second.bytes;
}

std::vector<RegionId> RegionTable::Ids() const {
  std::lock_guard lock(mu_);
  std::vector<RegionId> ids;
  for (const auto& [id, region] : regions_) ids.push_back(id);
  return ids;
}

PinnedRange& PinnedRange::operator=(PinnedRange&& o) noexcept {
  if (this != &o) {
    Reset();
    table_ = std::exchange(o.table_, nullptr);
    id_ = o.id_;
    data_ = std::exchange(o.data_, nullptr);
  }
  return *this;
}

void PinnedRange::Reset() {
  if (table_ != nullptr) table_->Unpin(id_);
  table_ = nullptr;
  data_ = nullptr;
}

absl::StatusOr<PinnedRange> PinRange(RegionTable& table, RegionId id, uint64_t offset,
                                     uint64_t bytes) {
  DQ_ASSIGN_OR_RETURN(std::byte * data, table.Pin(id, offset, bytes));
  return PinnedRange(&table, id, data);
}

}  // namespace dq::kvtransfer
