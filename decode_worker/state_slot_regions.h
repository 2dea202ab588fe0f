// The kvtransfer regions through which a prefill worker writes one lease's recurrent state (a
// hybrid model's STATE_PART_KIND_STATE_SLOT part): each lease's state slot is registered as its
// own region, like its KV block runs (lease_regions.h), with its own write key, and released
// before the slot returns to the pool, so a late write from a slow or dead prefill worker is
// refused instead of landing in a slot another request owns.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "decode_worker/kv_lease_table.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/state_slot_pool.h"
#include "kvtransfer/transport.h"

namespace dq::decode {

// Thread-safe. `transport` and `slots` must outlive it; `layout` describes `slots`' slots.
class StateSlotRegions {
 public:
  StateSlotRegions(kvtransfer::Transport& transport, StateSlotPool& slots,
                   dqserve::v1::StateSlotLayout layout)
      : transport_(transport), slots_(slots), layout_(std::move(layout)) {}
  ~StateSlotRegions();
  StateSlotRegions(const StateSlotRegions&) = delete;
  StateSlotRegions& operator=(const StateSlotRegions&) = delete;

  // Registers the lease's state slot (KvLease::state_slot) as one region and returns the
  // lease's target state slot part (required, its layout, an endpoint with that region).
  // FailedPrecondition for a lease without a slot; the transport's error otherwise (nothing
  // stays registered).
  absl::StatusOr<dqserve::v1::StatePart> Register(const KvLease& lease);
  // Releases the lease's region (none is fine). Blocks while a tcp copy into it is in flight.
  void Release(const std::string& lease_id);

  const dqserve::v1::StateSlotLayout& layout() const { return layout_; }
  // Regions registered now (tests, diagnostics).
  int num_regions() const;

 private:
  kvtransfer::Transport& transport_;
  StateSlotPool& slots_;
  const dqserve::v1::StateSlotLayout layout_;
  mutable std::mutex mu_;
  std::map<std::string, kvtransfer::RegionId> by_lease_;
};

}  // namespace dq::decode
