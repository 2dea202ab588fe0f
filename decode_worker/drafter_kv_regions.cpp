#include "decode_worker/drafter_kv_regions.h"

#include "absl/strings/str_cat.h"
#include "decode_worker/kv_lease_table.h"
#include "decode_worker/lease_regions.h"
#include "decode_worker/lease_staging.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

DrafterKvRegions::~DrafterKvRegions() {
  std::lock_guard lock(mu_);
  for (const auto& [lease, entry] : by_lease_)
    ReleaseRegionIds(transport_, entry.ids, "drafter KV");
  by_lease_.clear();
}

absl::StatusOr<v1::StatePart> DrafterKvRegions::Register(const std::string& lease_id,
                                                         int prompt_tokens) {
  const KvTensorLayout& cache = staging_.geometry();
  const int blocks = (prompt_tokens + cache.block_size - 1) / cache.block_size;
  // Numbered 0..blocks-1 in the buffer: the drafter's blocks are taken only at Land.
  const std::vector<BlockRun> runs = {BlockRun{0, blocks}};
  const LeaseStagingPlan plan = PlanLeaseStaging(runs, cache);
  auto buffer = staging_.AllocateHost(plan.host_bytes);
  if (!buffer.ok()) {
    return absl::Status(
        buffer.status().code(),
        absl::StrCat("staging lease ", lease_id, "'s drafter KV: ", buffer.status().message()));
  }
  Entry entry;
  entry.kv = std::make_shared<ShippedDrafterKv>();
  entry.kv->buffer = std::move(*buffer);
  entry.kv->prompt_blocks = blocks;
  v1::StatePart out;
  out.set_role(v1::STATE_PART_ROLE_DRAFTER);
  out.set_kind(v1::STATE_PART_KIND_PAGED_KV);
  out.set_required(false);  // a prefill worker without this drafter leaves it to this worker
  *out.mutable_kv_layout() = layout_;
  out.set_fingerprint(fingerprint_);
  v1::BlockRun* run = out.add_blocks();
  run->set_start_block(0);
  run->set_count(blocks);
  auto ids = RegisterPlanRegions(
      transport_, plan, cache, plan.host_layer_stride,
      [&](const StagedRegion& s) { return entry.kv->buffer->data() + s.host_offset; },
      out.mutable_endpoint());
  if (!ids.ok()) {
    return absl::Status(
        ids.status().code(),
        absl::StrCat("registering lease ", lease_id, "'s drafter KV: ", ids.status().message()));
  }
  entry.ids = std::move(*ids);
  std::lock_guard lock(mu_);
  Entry& slot = by_lease_[lease_id];
  slot.ids.insert(slot.ids.end(), entry.ids.begin(), entry.ids.end());
  slot.kv = std::move(entry.kv);
  return out;
}

std::shared_ptr<ShippedDrafterKv> DrafterKvRegions::Take(const std::string& lease_id) {
  std::lock_guard lock(mu_);
  auto it = by_lease_.find(lease_id);
  return it == by_lease_.end() ? nullptr : it->second.kv;
}

void DrafterKvRegions::Release(const std::string& lease_id) {
  Entry entry;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) return;
    entry = std::move(it->second);
    by_lease_.erase(it);
  }
  ReleaseRegionIds(transport_, entry.ids, "drafter KV");
}

absl::Status DrafterKvRegions::Land(const ShippedDrafterKv& kv, const KvSequence& blocks) {
  if (static_cast<int>(blocks.blocks.size()) < kv.prompt_blocks) {
    return absl::InternalError(absl::StrCat("the drafter's sequence holds ", blocks.blocks.size(),
                                            " blocks, its shipped prompt KV ", kv.prompt_blocks));
  }
  const std::vector<int32_t> prompt(blocks.blocks.begin(),
                                    blocks.blocks.begin() + kv.prompt_blocks);
  // The host layout depends on the prompt's block count only, so the plan over the real
  // blocks reads the buffer exactly as the regions over blocks 0..n-1 filled it.
  const LeaseStagingPlan plan = PlanLeaseStaging(ToBlockRuns(prompt), staging_.geometry());
  return staging_.CopyIn(plan.copies, kv.buffer->data());
}

int DrafterKvRegions::num_regions() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [lease, entry] : by_lease_) n += entry.ids.size();
  return static_cast<int>(n);
}

}  // namespace dq::decode
