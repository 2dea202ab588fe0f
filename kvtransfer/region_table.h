// The registered regions of one transport (or, for the local backend, of the whole process),
// with pin counts so that ReleaseRegion can wait until no copy touches a region before the
// caller frees its memory.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtransfer/transport.h"

namespace dq::kvtransfer {

// OK when [offset, offset + bytes) lies inside [0, size); otherwise OutOfRange naming `what`
// ("local region 3"). Overflow-safe.
absl::Status CheckRange(uint64_t offset, uint64_t bytes, uint64_t size, std::string_view what);

class RegionTable {
 public:
  struct Registration {
    RegionId id = 0;
    RegionKey key{};  // the region's write capability (transport.h), fresh random bits
  };
  // Adds a region under a fresh id (process-wide counter: ids are never reused, so a stale
  // descriptor can never alias a newer registration) and a fresh key.
  Registration Add(void* base, uint64_t bytes);
  // Whether a peer presenting `key` may write into region `id`: NotFound if it is not (or no
  // longer) registered, PermissionDenied if the key is not the region's. Receivers call it once
  // per announced transfer, before pinning anything for it.
  absl::Status CheckKey(RegionId id, const RegionKey& key) const;
  // Removes a region once its pin count drops to zero (new pins fail from the moment this is
  // called). NotFound if it is not registered.
  absl::Status Remove(RegionId id);
  // Pins [offset, offset + bytes) of region `id` and returns its first byte. NotFound if the
  // region is not (or no longer) registered, OutOfRange if the range does not fit.
  absl::StatusOr<std::byte*> Pin(RegionId id, uint64_t offset, uint64_t bytes);
  // Undoes one successful Pin.
  void Unpin(RegionId id);
  // The size of a registered region, or NotFound.
  absl::StatusOr<uint64_t> Size(RegionId id) const;
  // Every registered region (for teardown).
  std::vector<RegionId> Ids() const;

 private:
  struct Region {
    std::byte* base = nullptr;
    uint64_t bytes = 0;
    int pins = 0;
    bool removing = false;
    RegionKey key{};
  };
  mutable std::mutex mu_;
  std::condition_variable unpinned_;
  std::map<RegionId, Region> regions_;
};

// Holds one pin for its lifetime.
class PinnedRange {
 public:
  PinnedRange() = default;
  PinnedRange(RegionTable* table, RegionId id, std::byte* data)
      : table_(table), id_(id), data_(data) {}
  PinnedRange(PinnedRange&& o) noexcept { *this = std::move(o); }
  PinnedRange& operator=(PinnedRange&& o) noexcept;
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;
  ~PinnedRange() { Reset(); }
  std::byte* data() const { return data_; }
  void Reset();

 private:
  RegionTable* table_ = nullptr;
  RegionId id_ = 0;
  std::byte* data_ = nullptr;
};

// Pins and wraps in a guard.
absl::StatusOr<PinnedRange> PinRange(RegionTable& table, RegionId id, uint64_t offset,
                                     uint64_t bytes);

}  // namespace dq::kvtransfer
