// The self drafter's prompt KV on its way from a prefill worker (docs/speculative.md,
// "Disaggregation"). Each lease gets a staging buffer of its own for the drafter's layers,
// registered per layer and tensor like the target's regions (lease_regions.h) and declared in
// the lease as its drafter part (KvLease.parts: layout, weight fingerprint, blocks, endpoint). The
// drafter's own pool belongs to the engine thread (SelfDrafter is not thread-safe), so its blocks
// are taken only when the sequence starts drafting: Land then copies the buffer into them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "kvtransfer/transport.h"
#include "worker_common/kv_staging.h"

namespace dq::decode {

// What a prefill worker wrote for one lease: the drafter's prompt KV in the
// [tensor][layer][prompt block] layout of lease_staging.h.
struct ShippedDrafterKv {
  std::shared_ptr<worker::HostBuffer> buffer;
  int prompt_blocks = 0;
};

// Thread-safe.
class DrafterKvRegions {
 public:
  // `staging` is the drafter cache's (its geometry and copies); both must outlive this.
  DrafterKvRegions(kvtransfer::Transport& transport, worker::KvStaging& staging,
                   dqserve::v1::KvLayout layout, std::string fingerprint)
      : transport_(transport),
        staging_(staging),
        layout_(std::move(layout)),
        fingerprint_(std::move(fingerprint)) {}
  ~DrafterKvRegions();
  DrafterKvRegions(const DrafterKvRegions&) = delete;
  DrafterKvRegions& operator=(const DrafterKvRegions&) = delete;

  // Registers a buffer for the drafter KV of `prompt_tokens` tokens of lease `lease_id` and
  // returns the lease's drafter part. On error nothing stays registered.
  absl::StatusOr<dqserve::v1::StatePart> Register(const std::string& lease_id, int prompt_tokens);
  // The lease's buffer, once the prefill worker committed (null when it has none). Its regions
  // stay registered until Release.
  std::shared_ptr<ShippedDrafterKv> Take(const std::string& lease_id);
  // Releases the lease's regions (none is fine); the buffer lives on with whoever took it.
  void Release(const std::string& lease_id);
  // Copies `kv` into the drafter cache's `blocks` (token order; at least kv.prompt_blocks).
  // The blocks must not be in use by a forward pass.
  absl::Status Land(const ShippedDrafterKv& kv, const KvSequence& blocks);

  int num_regions() const;
  const dqserve::v1::KvLayout& layout() const { return layout_; }
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  struct Entry {
    std::vector<kvtransfer::RegionId> ids;
    std::shared_ptr<ShippedDrafterKv> kv;
  };

  kvtransfer::Transport& transport_;
  worker::KvStaging& staging_;
  const dqserve::v1::KvLayout layout_;
  const std::string fingerprint_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_lease_;
};

}  // namespace dq::decode
