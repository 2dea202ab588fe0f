// Where a lease's prompt KV waits in host memory while the cache is on a device, and the copies
// that move it into the lease's blocks once the lease is committed.
//
// Host layout: [tensor][layer][prompt block], prompt blocks in token order. The transfer region
// of (block run, layer, tensor) is then one contiguous range of the buffer, as the prefill
// worker expects (remote offset = (block - run start) * block_bytes), and landing it is one copy
// per (run, layer, tensor) into the cache's blocks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "decode_worker/kv_lease_table.h"
#include "worker_common/kv_staging.h"

namespace dq::decode {

// One transfer region of a lease: `run`'s blocks of one layer and tensor.
struct StagedRegion {
  int tensor = worker::kKeys;
  int layer = 0;
  BlockRun run;
  uint64_t host_offset = 0;  // in the lease's staging buffer
  uint64_t bytes = 0;
};

struct LeaseStagingPlan {
  uint64_t host_bytes = 0;             // the staging buffer's size
  uint64_t host_layer_stride = 0;      // between one layer's blocks and the next's
  std::vector<StagedRegion> regions;   // by run, then layer, then tensor (K before V)
  std::vector<worker::KvCopy> copies;  // host -> cache, regions[i] is copies[i]
};

// The plan for prompt blocks `runs` (in token order) of a cache laid out as `cache`.
LeaseStagingPlan PlanLeaseStaging(std::span<const BlockRun> runs, const KvTensorLayout& cache);

}  // namespace dq::decode
