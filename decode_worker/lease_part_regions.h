// The kvtransfer regions through which a prefill worker writes every part of one lease (the
// worker's sequence manifest, worker_common/sequence_manifest.h): the target's paged KV, a hybrid
// model's state slot, a drafter's prompt KV. One registry, one lifecycle for all parts:
// Register gives each lease's parts regions of their own (per block run, layer and tensor for
// paged KV; one over the slot for a state slot) and returns the lease's parts; Release drops
// every region of the lease before its blocks and slot return to the pool, so a late write from
// a slow or dead prefill worker is refused (tcp, local) instead of landing in memory another
// request owns by then.
//
// Where a part's regions are:
//   target KV: in the pool when it is host memory (CPU); in the device cache's blocks when the
//     transport moves device memory (nccl: "direct", nothing to land); else in a staging buffer
//     of the lease's own (page-locked on CUDA; lease_staging.h), which Land() copies into the
//     lease's blocks once the lease is committed;
//   state slot: the lease's slot of the pool's state slots (KvLease::state_slot);
//   drafter KV: always a staging buffer, [tensor][layer][prompt block]: the drafter's pool
//     belongs to the engine thread (SelfDrafter is not thread-safe), so its blocks are taken
//     only when the sequence starts drafting, and LandDrafterKv then copies the buffer in.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "decode_worker/kv_lease_table.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/kvcache/state_slot_pool.h"
#include "kvtransfer/transport.h"
#include "worker_common/kv_staging.h"

namespace dq::decode {

// What a prefill worker wrote for one lease: the drafter's prompt KV in the
// [tensor][layer][prompt block] layout of lease_staging.h.
struct ShippedDrafterKv {
  std::shared_ptr<worker::HostBuffer> buffer;
  int prompt_blocks = 0;
};

// Thread-safe once its parts are added (AddStateSlots, AddDrafterKv before the first Register).
class LeasePartRegions {
 public:
  // `transport` and `target_kv` (the target cache's staging) must outlive it; `target_layout` is
  // the target part's layout (worker::KvLayoutOf). `direct_for_tests`: register the staging's
  // device_tensor() although the transport reports host memory (the CPU pool standing in for a
  // GPU cache).
  LeasePartRegions(kvtransfer::Transport& transport, worker::KvStaging& target_kv,
                   dqserve::v1::KvLayout target_layout, bool direct_for_tests = false);
  ~LeasePartRegions();
  LeasePartRegions(const LeasePartRegions&) = delete;
  LeasePartRegions& operator=(const LeasePartRegions&) = delete;

  // A hybrid model's state slot part: each lease's slot of `slots` (laid out as `layout`).
  void AddStateSlots(StateSlotPool& slots, dqserve::v1::StateSlotLayout layout);
  // A drafter's prompt KV part (optional for the writer): staged through `staging`, the
  // drafter cache's (its geometry and copies); `fingerprint` names its weights.
  void AddDrafterKv(worker::KvStaging& staging, dqserve::v1::KvLayout layout,
                    std::string fingerprint);

  // The parts every lease holds, in lease order (target KV, state slot, drafter KV): what this
  // worker tells its peers at handshake (WorkerIdentity.manifest).
  const dqserve::v1::SequenceManifest& manifest() const { return manifest_; }

  // Registers every part of the manifest for `lease`, whose first `prompt_tokens` tokens the
  // prefill worker writes (after the lease's cached ones, KvLease::cached_tokens), and returns
  // the lease's parts: the manifest's, each with its endpoint (and the target's blocks and
  // cached tokens). On error nothing of the lease stays registered.
  absl::StatusOr<std::vector<dqserve::v1::StatePart>> Register(const KvLease& lease,
                                                               int prompt_tokens);

  // Moves what the prefill worker wrote into the lease's target staging buffer into its cache
  // blocks and returns once it is there; a no-op when the regions are the cache itself. Call it
  // after the lease is committed and before the sequence's first decode step. NotFound for a
  // lease without regions here.
  absl::Status Land(const std::string& lease_id);
  // The lease's shipped drafter KV once the prefill worker committed (null when it has none).
  // Its regions stay registered until Release; the buffer lives on with whoever took it.
  std::shared_ptr<ShippedDrafterKv> TakeDrafterKv(const std::string& lease_id);
  // Copies `kv` into the drafter cache's `blocks` (token order; at least kv.prompt_blocks).
  // The blocks must not be in use by a forward pass.
  absl::Status LandDrafterKv(const ShippedDrafterKv& kv, const KvSequence& blocks);

  // Releases every region of every part of `lease_id` (none is fine), then its staging buffer.
  // Blocks while a tcp copy into one of them is in flight (bounded by the transport's io
  // timeout).
  void Release(const std::string& lease_id);

  // Regions registered now, over all leases and parts (tests, diagnostics).
  int num_regions() const;
  // Whether the target's regions are the device cache's blocks (no staging, nothing to land).
  bool direct() const { return direct_; }
  bool has_state_slots() const { return slots_ != nullptr; }
  bool has_drafter_kv() const { return drafter_kv_ != nullptr; }

 private:
  struct Entry {
    std::vector<kvtransfer::RegionId> ids;         // every part's
    std::shared_ptr<worker::HostBuffer> staging;   // the target's; null when in the cache
    std::vector<worker::KvCopy> copies;            // target staging -> cache
    std::shared_ptr<ShippedDrafterKv> drafter_kv;  // null without a drafter part
  };
  // One part's regions into `entry` and its endpoint (and blocks) into `part`.
  absl::Status RegisterTargetKv(const KvLease& lease, int prompt_tokens, Entry& entry,
                                dqserve::v1::StatePart& part);
  absl::Status RegisterStateSlot(const KvLease& lease, Entry& entry, dqserve::v1::StatePart& part);
  absl::Status RegisterDrafterKv(const KvLease& lease, int prompt_tokens, Entry& entry,
                                 dqserve::v1::StatePart& part);

  kvtransfer::Transport& transport_;
  worker::KvStaging& target_kv_;
  const bool direct_;
  StateSlotPool* slots_ = nullptr;
  worker::KvStaging* drafter_kv_ = nullptr;
  dqserve::v1::SequenceManifest manifest_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_lease_;
};

}  // namespace dq::decode
