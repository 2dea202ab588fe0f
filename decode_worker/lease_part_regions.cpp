#include "decode_worker/lease_part_regions.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "decode_worker/lease_staging.h"
#include "worker_common/lease_parts.h"
#include "worker_common/sequence_manifest.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

namespace {

void ReleaseRegionIds(kvtransfer::Transport& transport,
                      const std::vector<kvtransfer::RegionId>& ids) {
  for (kvtransfer::RegionId id : ids) {
    // Only a bug fails here (the ids are ours, released once); the lease still ends.
    absl::Status s = transport.ReleaseRegion(id);
    if (!s.ok()) spdlog::warn("dq-decode: releasing lease region {}: {}", id, s.ToString());
  }
}

// Registers every region of `plan` at `address(region)` into `ids` and describes it in
// `endpoint` (`layer_stride`: bytes between a region's layers in that memory). On error the
// caller releases `ids`.
absl::Status RegisterPlanRegions(kvtransfer::Transport& transport, const LeaseStagingPlan& plan,
                                 const KvTensorLayout& cache, uint64_t layer_stride,
                                 const std::function<char*(const StagedRegion&)>& address,
                                 std::vector<kvtransfer::RegionId>& ids, v1::KvEndpoint* endpoint) {
  endpoint->set_transport(std::string(transport.name()));
  endpoint->set_address(transport.address());
  for (const StagedRegion& s : plan.regions) {
    DQ_ASSIGN_OR_RETURN(kvtransfer::RegionHandle handle,
                        transport.RegisterRegion(address(s), s.bytes));
    ids.push_back(handle.id);
    v1::KvRemoteRegion* r = endpoint->add_regions();
    r->set_tensor(s.tensor == worker::kKeys ? v1::KV_TENSOR_KEY : v1::KV_TENSOR_VALUE);
    r->set_first_layer(s.layer);
    r->set_num_layers(1);
    r->set_layer_stride_bytes(layer_stride);
    r->set_block_bytes(cache.block_bytes);
    r->set_region_descriptor(std::move(handle.descriptor));
    r->set_first_block(s.run.start);
    r->set_num_blocks(s.run.count);
  }
  return absl::OkStatus();
}

absl::Status Prefixed(const absl::Status& s, const std::string& what) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

LeasePartRegions::LeasePartRegions(kvtransfer::Transport& transport, worker::KvStaging& target_kv,
                                   v1::KvLayout target_layout, bool direct_for_tests)
    : transport_(transport),
      target_kv_(target_kv),
      direct_(transport.supports_device_memory() || direct_for_tests) {
  *manifest_.add_parts() =
      worker::PagedKvPart(v1::STATE_PART_ROLE_TARGET, std::move(target_layout));
  worker::SealManifest(&manifest_);
}

LeasePartRegions::~LeasePartRegions() {
  std::lock_guard lock(mu_);
  for (const auto& [lease, entry] : by_lease_) ReleaseRegionIds(transport_, entry.ids);
  by_lease_.clear();
}

void LeasePartRegions::AddStateSlots(StateSlotPool& slots, v1::StateSlotLayout layout) {
  slots_ = &slots;
  // Lease order: the target's state right after its KV.
  v1::SequenceManifest m;
  *m.add_parts() = manifest_.parts(0);
  *m.add_parts() = worker::StateSlotPart(std::move(layout));
  for (int i = 1; i < manifest_.parts_size(); ++i) *m.add_parts() = manifest_.parts(i);
  manifest_ = std::move(m);
  worker::SealManifest(&manifest_);
}

void LeasePartRegions::AddDrafterKv(worker::KvStaging& staging, v1::KvLayout layout,
                                    std::string fingerprint) {
  drafter_kv_ = &staging;
  worker::AddManifestPart(
      &manifest_,
      worker::PagedKvPart(v1::STATE_PART_ROLE_DRAFTER, std::move(layout), std::move(fingerprint)));
}

absl::StatusOr<std::vector<v1::StatePart>> LeasePartRegions::Register(const KvLease& lease,
                                                                      int prompt_tokens) {
  Entry entry;
  std::vector<v1::StatePart> parts;
  for (const v1::StatePart& layout : manifest_.parts()) {
    v1::StatePart& part = parts.emplace_back(layout);
    absl::Status s;
    if (layout.kind() == v1::STATE_PART_KIND_STATE_SLOT) {
      s = RegisterStateSlot(lease, entry, part);
    } else if (layout.role() == v1::STATE_PART_ROLE_TARGET) {
      s = RegisterTargetKv(lease, prompt_tokens, entry, part);
    } else {
      s = RegisterDrafterKv(lease, prompt_tokens, entry, part);
    }
    if (!s.ok()) {
      ReleaseRegionIds(transport_, entry.ids);  // then the buffers go with `entry`
      return s;
    }
  }
  std::lock_guard lock(mu_);
  Entry& slot = by_lease_[lease.lease_id];
  slot.ids.insert(slot.ids.end(), entry.ids.begin(), entry.ids.end());
  if (entry.staging) {
    slot.staging = std::move(entry.staging);
    slot.copies = std::move(entry.copies);
  }
  if (entry.drafter_kv) slot.drafter_kv = std::move(entry.drafter_kv);
  return parts;
}

absl::Status LeasePartRegions::RegisterTargetKv(const KvLease& lease, int prompt_tokens,
                                                Entry& entry, v1::StatePart& part) {
  const KvTensorLayout& cache = target_kv_.geometry();
  const int prompt_blocks = (prompt_tokens + cache.block_size - 1) / cache.block_size;
  if (prompt_blocks > static_cast<int>(lease.blocks.size())) {
    return absl::InternalError(absl::StrCat("lease ", lease.lease_id, " holds ",
                                            lease.blocks.size(), " blocks, the prompt needs ",
                                            prompt_blocks));
  }
  // Cached leading blocks are not written (and may be shared with other sequences): only the
  // blocks after them get regions.
  const int cached_blocks = std::min(lease.cached_tokens / cache.block_size, prompt_blocks);
  const std::vector<int32_t> prompt(lease.blocks.begin() + cached_blocks,
                                    lease.blocks.begin() + prompt_blocks);
  const LeaseStagingPlan plan = PlanLeaseStaging(ToBlockRuns(prompt), cache);
  char* base[2] = {target_kv_.host_tensor(worker::kKeys), target_kv_.host_tensor(worker::kValues)};
  if (direct_) {
    base[worker::kKeys] = target_kv_.device_tensor(worker::kKeys);
    base[worker::kValues] = target_kv_.device_tensor(worker::kValues);
    if (base[worker::kKeys] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", std::string(transport_.name()),
          " KV transport writes GPU memory, but this decode worker keeps its KV on the CPU; run "
          "it with --device cuda:N or use --transport tcp"));
    }
  } else if (target_kv_.staged()) {
    auto buffer = target_kv_.AllocateHost(plan.host_bytes);
    if (!buffer.ok()) {
      return Prefixed(buffer.status(), absl::StrCat("staging lease ", lease.lease_id, "'s KV"));
    }
    entry.staging = std::move(*buffer);
    entry.copies = plan.copies;
  }
  // In place or direct: the cache's own blocks; staged: the lease's buffer.
  const absl::Status s = RegisterPlanRegions(
      transport_, plan, cache, entry.staging ? plan.host_layer_stride : cache.layer_stride_bytes(),
      [&](const StagedRegion& r) {
        return entry.staging ? entry.staging->data() + r.host_offset
                             : base[r.tensor] + cache.offset(r.layer, r.run.start);
      },
      entry.ids, part.mutable_endpoint());
  if (!s.ok()) {
    return Prefixed(s, absl::StrCat("registering lease ", lease.lease_id, "'s KV with the ",
                                    std::string(transport_.name()), " transport"));
  }
  for (const BlockRun& run : lease.runs) {
    v1::BlockRun* b = part.add_blocks();
    b->set_start_block(run.start);
    b->set_count(run.count);
  }
  part.set_cached_tokens(static_cast<uint32_t>(lease.cached_tokens));
  return absl::OkStatus();
}

absl::Status LeasePartRegions::RegisterStateSlot(const KvLease& lease, Entry& entry,
                                                 v1::StatePart& part) {
  if (lease.state_slot < 0 || lease.state_slot >= slots_->num_slots()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease.lease_id, " has no state slot; this hybrid model needs one"));
  }
  const v1::StateSlotLayout& layout = part.slot_layout();
  const uint64_t bytes = worker::StateSlotBytes(layout);
  if (bytes != slots_->slot_bytes()) {
    return absl::InternalError(absl::StrCat("the state slot layout says ", bytes,
                                            " bytes per slot, the pool holds ",
                                            slots_->slot_bytes()));
  }
  auto handle = transport_.RegisterRegion(slots_->slot(lease.state_slot), bytes);
  if (!handle.ok()) {
    return Prefixed(handle.status(),
                    absl::StrCat("registering lease ", lease.lease_id, "'s state slot with the ",
                                 std::string(transport_.name()), " transport"));
  }
  entry.ids.push_back(handle->id);
  v1::KvEndpoint* endpoint = part.mutable_endpoint();
  endpoint->set_transport(std::string(transport_.name()));
  endpoint->set_address(transport_.address());
  v1::KvRemoteRegion* r = endpoint->add_regions();
  r->set_tensor(v1::KV_TENSOR_STATE_SLOT);
  r->set_first_layer(0);
  r->set_num_layers(static_cast<uint32_t>(layout.layers_size()));
  r->set_layer_stride_bytes(layout.layer_bytes());
  r->set_block_bytes(bytes);
  r->set_num_blocks(1);
  r->set_region_descriptor(std::move(handle->descriptor));
  return absl::OkStatus();
}

absl::Status LeasePartRegions::RegisterDrafterKv(const KvLease& lease, int prompt_tokens,
                                                 Entry& entry, v1::StatePart& part) {
  const KvTensorLayout& cache = drafter_kv_->geometry();
  const int blocks = (prompt_tokens + cache.block_size - 1) / cache.block_size;
  // Numbered 0..blocks-1 in the buffer: the drafter's blocks are taken only at LandDrafterKv.
  const std::vector<BlockRun> runs = {BlockRun{0, blocks}};
  const LeaseStagingPlan plan = PlanLeaseStaging(runs, cache);
  auto buffer = drafter_kv_->AllocateHost(plan.host_bytes);
  if (!buffer.ok()) {
    return Prefixed(buffer.status(),
                    absl::StrCat("staging lease ", lease.lease_id, "'s drafter KV"));
  }
  entry.drafter_kv = std::make_shared<ShippedDrafterKv>();
  entry.drafter_kv->buffer = std::move(*buffer);
  entry.drafter_kv->prompt_blocks = blocks;
  v1::BlockRun* run = part.add_blocks();
  run->set_start_block(0);
  run->set_count(blocks);
  char* data = entry.drafter_kv->buffer->data();
  const absl::Status s = RegisterPlanRegions(
      transport_, plan, cache, plan.host_layer_stride,
      [&](const StagedRegion& r) { return data + r.host_offset; }, entry.ids,
      part.mutable_endpoint());
  if (!s.ok()) {
    return Prefixed(s, absl::StrCat("registering lease ", lease.lease_id, "'s drafter KV"));
  }
  return absl::OkStatus();
}

absl::Status LeasePartRegions::Land(const std::string& lease_id) {
  std::shared_ptr<worker::HostBuffer> buffer;
  std::vector<worker::KvCopy> copies;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) {
      return absl::NotFoundError(
          absl::StrCat("lease ", lease_id, " has no KV regions on this decode worker"));
    }
    if (!it->second.staging) return absl::OkStatus();
    // Held past the lock: a concurrent Release frees the buffer only after this copy.
    buffer = it->second.staging;
    copies = it->second.copies;
  }
  absl::Status s = target_kv_.CopyIn(copies, buffer->data());
  if (!s.ok()) {
    return Prefixed(s, absl::StrCat("moving lease ", lease_id, "'s staged KV into the cache"));
  }
  return absl::OkStatus();
}

std::shared_ptr<ShippedDrafterKv> LeasePartRegions::TakeDrafterKv(const std::string& lease_id) {
  std::lock_guard lock(mu_);
  auto it = by_lease_.find(lease_id);
  return it == by_lease_.end() ? nullptr : it->second.drafter_kv;
}

absl::Status LeasePartRegions::LandDrafterKv(const ShippedDrafterKv& kv, const KvSequence& blocks) {
  if (drafter_kv_ == nullptr) {
    return absl::InternalError("this decode worker registers no drafter KV part");
  }
  if (static_cast<int>(blocks.blocks.size()) < kv.prompt_blocks) {
    return absl::InternalError(absl::StrCat("the drafter's sequence holds ", blocks.blocks.size(),
                                            " blocks, its shipped prompt KV ", kv.prompt_blocks));
  }
  const std::vector<int32_t> prompt(blocks.blocks.begin(),
                                    blocks.blocks.begin() + kv.prompt_blocks);
  // The host layout depends on the prompt's block count only, so the plan over the real
  // blocks reads the buffer exactly as the regions over blocks 0..n-1 filled it.
  const LeaseStagingPlan plan = PlanLeaseStaging(ToBlockRuns(prompt), drafter_kv_->geometry());
  return drafter_kv_->CopyIn(plan.copies, kv.buffer->data());
}

void LeasePartRegions::Release(const std::string& lease_id) {
  Entry entry;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) return;
    entry = std::move(it->second);
    by_lease_.erase(it);
  }
  // Regions first: after this no transport writes into the buffers, which may then be reused.
  ReleaseRegionIds(transport_, entry.ids);
}

int LeasePartRegions::num_regions() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [lease, entry] : by_lease_) n += entry.ids.size();
  return static_cast<int>(n);
}

}  // namespace dq::decode
