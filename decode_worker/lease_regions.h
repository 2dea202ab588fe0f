// The kvtransfer regions through which a prefill worker writes one lease's prompt KV.
//
// Each lease's prompt blocks are registered as their own regions (one per block run, layer and
// tensor) rather than the whole pool once: when the lease ends, its regions are released before
// its blocks return to the pool, so a late write from a slow or dead prefill worker is refused
// (tcp, local) instead of landing in blocks another request already owns.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decode_worker/kv_lease_table.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "kvtransfer/transport.h"

namespace dq::decode {

// Thread-safe.
class LeaseRegions {
 public:
  // `pool` is only read for addresses and sizes (never its free list, which is not
  // thread-safe); both must outlive this object.
  LeaseRegions(kvtransfer::Transport& transport, KvBlockPool& pool)
      : transport_(transport), pool_(pool) {}
  ~LeaseRegions();
  LeaseRegions(const LeaseRegions&) = delete;
  LeaseRegions& operator=(const LeaseRegions&) = delete;

  // Registers the blocks holding the lease's first `prompt_tokens` tokens and returns the
  // endpoint the prefill worker writes to. On error nothing stays registered.
  absl::StatusOr<dqserve::v1::KvEndpoint> Register(const KvLease& lease, int prompt_tokens);

  // Releases every region of `lease_id` (none is fine). Blocks while a tcp copy into one of them
  // is in flight (bounded by the transport's io timeout).
  void Release(const std::string& lease_id);

  // Regions registered now, over all leases (tests, diagnostics).
  int num_regions() const;

 private:
  void ReleaseAll(const std::vector<kvtransfer::RegionId>& ids);

  kvtransfer::Transport& transport_;
  KvBlockPool& pool_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<kvtransfer::RegionId>> by_lease_;
};

}  // namespace dq::decode
