// Where each KV block of a prompt goes in one part of a decode worker's lease (worker.proto
// StatePart: the target's KV or a drafter's): the part's block runs in token order, and the
// per-(tensor, layer, block run) regions the decode worker registered.
// Turns "layer l, prompt blocks [i, j)" into a few CopyOps per remote region, merging
// consecutive blocks, so one layer of a chunk is a handful of Posts rather than one per block.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "dqserve/v1/worker.pb.h"
#include "engine/kvcache/kv_tensor_layout.h"
#include "kvtransfer/transport.h"

namespace dq::prefill {

// All copies of one tensor's blocks of one layer that land in one remote region: one Post.
struct RegionCopies {
  int region = 0;  // index into the part's endpoint.regions
  std::vector<kvtransfer::CopyOp> copies;
};

class LeasePlan {
 public:
  // Checks that the part can hold `num_tokens` tokens of this layout (every block of every layer
  // of both tensors is covered by a region with our block size) and indexes it. `name` names the
  // part in errors ("lease 7", "lease 7 (drafter)"). Errors: InvalidArgument naming what is wrong.
  static absl::StatusOr<LeasePlan> Create(const std::string& name,
                                          const dqserve::v1::StatePart& part, int num_tokens,
                                          const KvTensorLayout& local);

  // The remote block id that holds prompt block `index` (token t is in block t / block_size).
  int32_t remote_block(int index) const { return remote_blocks_[index]; }
  // Prompt blocks before this one are cached on the decode worker (StatePart.cached_tokens):
  // nothing ships for them.
  int first_shipped_block() const { return first_shipped_; }
  int num_regions() const { return static_cast<int>(regions_.size()); }

  // The copies that ship prompt blocks [first, last) of `layer` and `tensor` (less the cached
  // ones before first_shipped_block()), read from the local blocks `local_blocks` (indexed by
  // prompt block), grouped by remote region, consecutive blocks merged into one CopyOp.
  std::vector<RegionCopies> Copies(dqserve::v1::KvTensor tensor, int layer, int first, int last,
                                   std::span<const int32_t> local_blocks) const;

 private:
  struct Region {
    dqserve::v1::KvTensor tensor;
    int first_layer;
    int num_layers;
    uint64_t layer_stride_bytes;
    int64_t first_block;
    int64_t num_blocks;
  };
  // The region holding (tensor, layer, remote block), or -1.
  int Find(dqserve::v1::KvTensor tensor, int layer, int32_t block) const;
  // by_layer_'s index of (tensor, layer); layer in [0, local_.num_layers).
  size_t LayerSlot(dqserve::v1::KvTensor tensor, int layer) const;

  KvTensorLayout local_;
  int first_shipped_ = 0;
  std::vector<int32_t> remote_blocks_;
  std::vector<Region> regions_;
  // The regions covering each (tensor, local layer), K's layers first: Find scans only these
  // (an 8K-token prompt checks and copies ~37K blocks; a scan over every region cost ms).
  std::vector<std::vector<int>> by_layer_;
};

}  // namespace dq::prefill
