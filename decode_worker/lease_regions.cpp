#include "decode_worker/lease_regions.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "decode_worker/lease_staging.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

absl::StatusOr<std::vector<kvtransfer::RegionId>> RegisterPlanRegions(
    kvtransfer::Transport& transport, const LeaseStagingPlan& plan, const KvTensorLayout& cache,
    uint64_t layer_stride, const std::function<char*(const StagedRegion&)>& address,
    v1::KvEndpoint* endpoint) {
  endpoint->set_transport(std::string(transport.name()));
  endpoint->set_address(transport.address());
  std::vector<kvtransfer::RegionId> ids;
  for (const StagedRegion& s : plan.regions) {
    auto handle = transport.RegisterRegion(address(s), s.bytes);
    if (!handle.ok()) {
      ReleaseRegionIds(transport, ids, "KV");
      return handle.status();
    }
    ids.push_back(handle->id);
    v1::KvRemoteRegion* r = endpoint->add_regions();
    r->set_tensor(s.tensor == worker::kKeys ? v1::KV_TENSOR_KEY : v1::KV_TENSOR_VALUE);
    r->set_first_layer(s.layer);
    r->set_num_layers(1);
    r->set_layer_stride_bytes(layer_stride);
    r->set_block_bytes(cache.block_bytes);
    r->set_region_descriptor(std::move(handle->descriptor));
    r->set_first_block(s.run.start);
    r->set_num_blocks(s.run.count);
  }
  return ids;
}

void ReleaseRegionIds(kvtransfer::Transport& transport,
                      const std::vector<kvtransfer::RegionId>& ids, const char* what) {
  for (kvtransfer::RegionId id : ids) {
    absl::Status s = transport.ReleaseRegion(id);
    if (!s.ok()) spdlog::warn("dq-decode: releasing {} region {}: {}", what, id, s.ToString());
  }
}

LeaseRegions::~LeaseRegions() {
  std::lock_guard lock(mu_);
  for (const auto& [lease, entry] : by_lease_) ReleaseRegionIds(transport_, entry.ids, "KV");
  by_lease_.clear();
}

absl::StatusOr<v1::KvEndpoint> LeaseRegions::Register(const KvLease& lease, int prompt_tokens) {
  const KvTensorLayout& cache = staging_.geometry();
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
  const std::vector<BlockRun> runs = ToBlockRuns(prompt);
  const LeaseStagingPlan plan = PlanLeaseStaging(runs, cache);
  Entry entry;
  char* base[2] = {staging_.host_tensor(worker::kKeys), staging_.host_tensor(worker::kValues)};
  if (direct_) {
    base[worker::kKeys] = staging_.device_tensor(worker::kKeys);
    base[worker::kValues] = staging_.device_tensor(worker::kValues);
    if (base[worker::kKeys] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ", std::string(transport_.name()),
          " KV transport writes GPU memory, but this decode worker keeps its KV on the CPU; run "
          "it with --device cuda:N or use --transport tcp"));
    }
  } else if (staging_.staged()) {
    auto buffer = staging_.AllocateHost(plan.host_bytes);
    if (!buffer.ok()) {
      return absl::Status(
          buffer.status().code(),
          absl::StrCat("staging lease ", lease.lease_id, "'s KV: ", buffer.status().message()));
    }
    entry.staging = std::move(*buffer);
    entry.copies = plan.copies;
  }
  v1::KvEndpoint endpoint;
  // In place or direct: the cache's own blocks; staged: the lease's buffer.
  auto ids = RegisterPlanRegions(
      transport_, plan, cache, entry.staging ? plan.host_layer_stride : cache.layer_stride_bytes(),
      [&](const StagedRegion& s) {
        return entry.staging ? entry.staging->data() + s.host_offset
                             : base[s.tensor] + cache.offset(s.layer, s.run.start);
      },
      &endpoint);
  if (!ids.ok()) {
    return absl::Status(
        ids.status().code(),
        absl::StrCat("registering lease ", lease.lease_id, "'s KV with the ",
                     std::string(transport_.name()), " transport: ", ids.status().message()));
  }
  entry.ids = std::move(*ids);
  std::lock_guard lock(mu_);
  Entry& slot = by_lease_[lease.lease_id];
  slot.ids.insert(slot.ids.end(), entry.ids.begin(), entry.ids.end());
  if (entry.staging) {
    slot.staging = std::move(entry.staging);
    slot.copies = std::move(entry.copies);
  }
  return endpoint;
}

absl::Status LeaseRegions::Land(const std::string& lease_id) {
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
  absl::Status s = staging_.CopyIn(copies, buffer->data());
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("moving lease ", lease_id,
                                               "'s staged KV into the cache: ", s.message()));
  }
  return absl::OkStatus();
}

void LeaseRegions::Release(const std::string& lease_id) {
  Entry entry;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) return;
    entry = std::move(it->second);
    by_lease_.erase(it);
  }
  // Regions first: after this no transport writes into the buffer, which may then be reused.
  ReleaseRegionIds(transport_, entry.ids, "KV");
}

int LeaseRegions::num_regions() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [lease, entry] : by_lease_) n += entry.ids.size();
  return static_cast<int>(n);
}

}  // namespace dq::decode
