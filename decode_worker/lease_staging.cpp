#include "decode_worker/lease_staging.h"

namespace dq::decode {

LeaseStagingPlan PlanLeaseStaging(std::span<const BlockRun> runs, const KvTensorLayout& cache) {
  LeaseStagingPlan plan;
  uint64_t blocks = 0;
  for (const BlockRun& r : runs) blocks += static_cast<uint64_t>(r.count);
  plan.host_layer_stride = blocks * cache.block_bytes;
  const uint64_t tensor_bytes = cache.num_layers * plan.host_layer_stride;
  plan.host_bytes = 2 * tensor_bytes;
  uint64_t first = 0;  // the run's first prompt block
  for (const BlockRun& r : runs) {
    const uint64_t bytes = static_cast<uint64_t>(r.count) * cache.block_bytes;
    for (int layer = 0; layer < cache.num_layers; ++layer) {
      for (int tensor : {worker::kKeys, worker::kValues}) {
        const uint64_t host =
            tensor * tensor_bytes + layer * plan.host_layer_stride + first * cache.block_bytes;
        plan.regions.push_back({tensor, layer, r, host, bytes});
        plan.copies.push_back({tensor, host, cache.offset(layer, r.start), bytes});
      }
    }
    first += static_cast<uint64_t>(r.count);
  }
  return plan;
}

}  // namespace dq::decode
