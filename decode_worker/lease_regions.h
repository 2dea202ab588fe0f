// The kvtransfer regions through which a prefill worker writes one lease's prompt KV.
//
// Each lease's prompt blocks are registered as their own regions (one per block run, layer and
// tensor) rather than the whole pool once: when the lease ends, its regions are released before
// its blocks return to the pool, so a late write from a slow or dead prefill worker is refused
// (tcp, local) instead of landing in blocks another request already owns.
//
// Where the regions are depends on the KV cache (worker::KvStaging) and the transport: in the
// pool itself when it is host memory (CPU); in the device cache's blocks themselves when the
// transport moves device memory (nccl: "direct", no staging buffer, nothing to land); else in a
// staging buffer of the lease's own (page-locked on CUDA; plan in lease_staging.h), which Land()
// copies into the lease's blocks once the lease is committed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decode_worker/kv_lease_table.h"
#include "decode_worker/lease_staging.h"
#include "dqserve/v1/worker.pb.h"
#include "kvtransfer/transport.h"
#include "worker_common/kv_staging.h"

namespace dq::decode {

// Registers every region of `plan` with `transport` at `address(region)` and describes it in
// `endpoint` (with the transport's name and address; `layer_stride`: bytes between a region's
// layers in that memory). On error releases what it registered and returns the transport's error.
// Shared by the target's regions and the drafter's (drafter_kv_regions.h).
absl::StatusOr<std::vector<kvtransfer::RegionId>> RegisterPlanRegions(
    kvtransfer::Transport& transport, const LeaseStagingPlan& plan, const KvTensorLayout& cache,
    uint64_t layer_stride, const std::function<char*(const StagedRegion&)>& address,
    dqserve::v1::KvEndpoint* endpoint);

// Releases `ids`; a failure (only a bug: the ids are ours, released once) is logged as a
// `what` region, and the lease still ends.
void ReleaseRegionIds(kvtransfer::Transport& transport,
                      const std::vector<kvtransfer::RegionId>& ids, const char* what);

// Thread-safe.
class LeaseRegions {
 public:
  // Both must outlive this object. `direct_for_tests`: register the staging's device_tensor()
  // although the transport reports host memory (the CPU pool standing in for a GPU cache).
  LeaseRegions(kvtransfer::Transport& transport, worker::KvStaging& staging,
               bool direct_for_tests = false)
      : transport_(transport),
        staging_(staging),
        direct_(transport.supports_device_memory() || direct_for_tests) {}
  ~LeaseRegions();
  LeaseRegions(const LeaseRegions&) = delete;
  LeaseRegions& operator=(const LeaseRegions&) = delete;

  // Registers the blocks holding the lease's first `prompt_tokens` tokens after its cached ones
  // (KvLease::cached_tokens), or a staging buffer for them, and returns the endpoint the
  // prefill worker writes to. On error nothing stays registered.
  absl::StatusOr<dqserve::v1::KvEndpoint> Register(const KvLease& lease, int prompt_tokens);

  // Moves what the prefill worker wrote into the lease's staging buffer into its cache blocks
  // and returns once it is there; a no-op when the regions are the cache itself. Call it after
  // the lease is committed (the prefill is done writing, and the blocks are the lease's until
  // it is released) and before the sequence's first decode step. NotFound for a lease without
  // regions here.
  absl::Status Land(const std::string& lease_id);

  // Releases every region of `lease_id` (none is fine), then its staging buffer. Blocks while a
  // tcp copy into one of them is in flight (bounded by the transport's io timeout).
  void Release(const std::string& lease_id);

  // Regions registered now, over all leases (tests, diagnostics).
  int num_regions() const;
  // Whether the regions are the device cache's blocks (no staging, nothing to land).
  bool direct() const { return direct_; }

 private:
  struct Entry {
    std::vector<kvtransfer::RegionId> ids;
    std::shared_ptr<worker::HostBuffer> staging;  // null when the regions are the cache
    std::vector<worker::KvCopy> copies;           // staging -> cache
  };
  kvtransfer::Transport& transport_;
  worker::KvStaging& staging_;
  const bool direct_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_lease_;
};

}  // namespace dq::decode
