#include "decode_worker/state_slot_regions.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker_common/lease_parts.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

StateSlotRegions::~StateSlotRegions() {
  std::lock_guard lock(mu_);
  for (const auto& [lease, id] : by_lease_) {
    absl::Status s = transport_.ReleaseRegion(id);
    if (!s.ok()) spdlog::warn("dq-decode: releasing state slot region {}: {}", id, s.ToString());
  }
  by_lease_.clear();
}

absl::StatusOr<v1::StatePart> StateSlotRegions::Register(const KvLease& lease) {
  if (lease.state_slot < 0 || lease.state_slot >= slots_.num_slots()) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease.lease_id, " has no state slot; this hybrid model needs one"));
  }
  const uint64_t bytes = worker::StateSlotBytes(layout_);
  if (bytes != slots_.slot_bytes()) {
    return absl::InternalError(absl::StrCat("the state slot layout says ", bytes,
                                            " bytes per slot, the pool holds ",
                                            slots_.slot_bytes()));
  }
  auto handle = transport_.RegisterRegion(slots_.slot(lease.state_slot), bytes);
  if (!handle.ok()) {
    return absl::Status(
        handle.status().code(),
        absl::StrCat("registering lease ", lease.lease_id, "'s state slot with the ",
                     std::string(transport_.name()), " transport: ", handle.status().message()));
  }
  {
    std::lock_guard lock(mu_);
    by_lease_[lease.lease_id] = handle->id;
  }
  v1::StatePart part;
  part.set_role(v1::STATE_PART_ROLE_TARGET);
  part.set_kind(v1::STATE_PART_KIND_STATE_SLOT);
  part.set_required(true);
  *part.mutable_slot_layout() = layout_;
  v1::KvEndpoint* endpoint = part.mutable_endpoint();
  endpoint->set_transport(std::string(transport_.name()));
  endpoint->set_address(transport_.address());
  v1::KvRemoteRegion* r = endpoint->add_regions();
  r->set_tensor(v1::KV_TENSOR_STATE_SLOT);
  r->set_first_layer(0);
  r->set_num_layers(static_cast<uint32_t>(layout_.layers_size()));
  r->set_layer_stride_bytes(layout_.layer_bytes());
  r->set_block_bytes(bytes);
  r->set_num_blocks(1);
  r->set_region_descriptor(std::move(handle->descriptor));
  return part;
}

void StateSlotRegions::Release(const std::string& lease_id) {
  kvtransfer::RegionId id = 0;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) return;
    id = it->second;
    by_lease_.erase(it);
  }
  absl::Status s = transport_.ReleaseRegion(id);
  if (!s.ok()) spdlog::warn("dq-decode: releasing state slot region {}: {}", id, s.ToString());
}

int StateSlotRegions::num_regions() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(by_lease_.size());
}

}  // namespace dq::decode
