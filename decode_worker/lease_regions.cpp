#include "decode_worker/lease_regions.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace dq::decode {
namespace v1 = dqserve::v1;

LeaseRegions::~LeaseRegions() {
  std::lock_guard lock(mu_);
  for (const auto& [lease, ids] : by_lease_) ReleaseAll(ids);
  by_lease_.clear();
}

absl::StatusOr<v1::KvEndpoint> LeaseRegions::Register(const KvLease& lease, int prompt_tokens) {
  const int prompt_blocks = pool_.BlocksFor(prompt_tokens);
  if (prompt_blocks > static_cast<int>(lease.blocks.size())) {
    return absl::InternalError(absl::StrCat("lease ", lease.lease_id, " holds ",
                                            lease.blocks.size(), " blocks, the prompt needs ",
                                            prompt_blocks));
  }
  const std::vector<int32_t> prompt(lease.blocks.begin(), lease.blocks.begin() + prompt_blocks);
  v1::KvEndpoint endpoint;
  endpoint.set_transport(std::string(transport_.name()));
  endpoint.set_address(transport_.address());
  std::vector<kvtransfer::RegionId> ids;
  const int layers = pool_.options().num_layers;
  const uint64_t block_bytes = pool_.block_bytes();
  for (const BlockRun& run : ToBlockRuns(prompt)) {
    for (int layer = 0; layer < layers; ++layer) {
      for (v1::KvTensor tensor : {v1::KV_TENSOR_KEY, v1::KV_TENSOR_VALUE}) {
        float* base = tensor == v1::KV_TENSOR_KEY ? pool_.keys_data() : pool_.values_data();
        char* at = reinterpret_cast<char*>(base) + pool_.block_offset(layer, run.start);
        auto handle = transport_.RegisterRegion(at, run.count * block_bytes);
        if (!handle.ok()) {
          ReleaseAll(ids);
          return absl::Status(handle.status().code(),
                              absl::StrCat("registering lease ", lease.lease_id, "'s KV with the ",
                                           std::string(transport_.name()),
                                           " transport: ", handle.status().message()));
        }
        ids.push_back(handle->id);
        v1::KvRemoteRegion* r = endpoint.add_regions();
        r->set_tensor(tensor);
        r->set_first_layer(layer);
        r->set_num_layers(1);
        r->set_layer_stride_bytes(pool_.layer_stride_bytes());
        r->set_block_bytes(block_bytes);
        r->set_region_descriptor(std::move(handle->descriptor));
        r->set_first_block(run.start);
        r->set_num_blocks(run.count);
      }
    }
  }
  std::lock_guard lock(mu_);
  auto& slot = by_lease_[lease.lease_id];
  slot.insert(slot.end(), ids.begin(), ids.end());
  return endpoint;
}

void LeaseRegions::Release(const std::string& lease_id) {
  std::vector<kvtransfer::RegionId> ids;
  {
    std::lock_guard lock(mu_);
    auto it = by_lease_.find(lease_id);
    if (it == by_lease_.end()) return;
    ids = std::move(it->second);
    by_lease_.erase(it);
  }
  ReleaseAll(ids);
}

int LeaseRegions::num_regions() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [lease, ids] : by_lease_) n += ids.size();
  return static_cast<int>(n);
}

void LeaseRegions::ReleaseAll(const std::vector<kvtransfer::RegionId>& ids) {
  for (kvtransfer::RegionId id : ids) {
    absl::Status s = transport_.ReleaseRegion(id);
    // Only a bug can make this fail (ids are ours, released once); the lease still ends.
    if (!s.ok()) spdlog::warn("dq-decode: releasing KV region {}: {}", id, s.ToString());
  }
}

}  // namespace dq::decode
