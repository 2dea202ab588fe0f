#include "prefill_worker/lease_plan.h"

#include <algorithm>

namespace dq::prefill {
namespace v1 = dqserve::v1;

namespace {

std::string TensorName(v1::KvTensor t) { return t == v1::KV_TENSOR_KEY ? "K" : "V"; }

}  // namespace

absl::StatusOr<LeasePlan> LeasePlan::Create(const std::string& name, const v1::StatePart& part,
                                            int num_tokens, const KvTensorLayout& local) {
  LeasePlan plan;
  plan.local_ = local;
  for (const v1::BlockRun& run : part.blocks()) {
    if (run.count() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has an empty block run at block ",
                                                     run.start_block(), "; runs need count >= 1"));
    }
    for (uint32_t i = 0; i < run.count(); ++i) {
      plan.remote_blocks_.push_back(static_cast<int32_t>(run.start_block() + i));
    }
  }
  const int needed = (num_tokens + local.block_size - 1) / local.block_size;
  if (static_cast<int>(plan.remote_blocks_.size()) < needed) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds ", plan.remote_blocks_.size(), " blocks but the ", num_tokens,
                     "-token prompt needs ", needed, " (block size ", local.block_size,
                     "); reserve the lease for the whole prompt"));
  }
  if (part.cached_tokens() % local.block_size != 0 ||
      part.cached_tokens() >= static_cast<uint32_t>(std::max(num_tokens, 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " says ", part.cached_tokens(), " of the ", num_tokens,
                     " prompt tokens are cached; that must be whole blocks of ", local.block_size,
                     " before the prompt's last token"));
  }
  plan.first_shipped_ = static_cast<int>(part.cached_tokens()) / local.block_size;
  for (const v1::KvRemoteRegion& r : part.endpoint().regions()) {
    if (r.tensor() != v1::KV_TENSOR_KEY && r.tensor() != v1::KV_TENSOR_VALUE) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has a region without a tensor (K or V)"));
    }
    if (r.block_bytes() != local.block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " region has block_bytes ", r.block_bytes(), " but this worker's blocks are ",
          local.block_bytes, " bytes; the KV layouts differ"));
    }
    int64_t blocks = r.num_blocks();
    if (blocks == 0 && r.block_bytes() > 0) blocks = r.layer_stride_bytes() / r.block_bytes();
    plan.regions_.push_back(Region{r.tensor(), static_cast<int>(r.first_layer()),
                                   static_cast<int>(r.num_layers()), r.layer_stride_bytes(),
                                   r.first_block(), blocks});
  }
  plan.by_layer_.resize(2 * static_cast<size_t>(local.num_layers));
  for (size_t k = 0; k < plan.regions_.size(); ++k) {
    const Region& r = plan.regions_[k];
    const int first = std::max(r.first_layer, 0);
    const int last = std::min(r.first_layer + r.num_layers, local.num_layers);
    for (int layer = first; layer < last; ++layer) {
      plan.by_layer_[plan.LayerSlot(r.tensor, layer)].push_back(static_cast<int>(k));
    }
  }
  // Every block the prompt writes must have a home, checked now so that a bad lease fails before
  // any compute rather than halfway through a layer.
  for (v1::KvTensor t : {v1::KV_TENSOR_KEY, v1::KV_TENSOR_VALUE}) {
    for (int layer = 0; layer < local.num_layers; ++layer) {
      for (int i = plan.first_shipped_; i < needed; ++i) {
        if (plan.Find(t, layer, plan.remote_blocks_[i]) < 0) {
          return absl::InvalidArgumentError(absl::StrCat(name, " has no ", TensorName(t),
                                                         " region for layer ", layer, " block ",
                                                         plan.remote_blocks_[i]));
        }
      }
    }
  }
  return plan;
}

size_t LeasePlan::LayerSlot(v1::KvTensor tensor, int layer) const {
  return (tensor == v1::KV_TENSOR_KEY ? 0 : static_cast<size_t>(local_.num_layers)) +
         static_cast<size_t>(layer);
}

int LeasePlan::Find(v1::KvTensor tensor, int layer, int32_t block) const {
  if (layer < 0 || layer >= local_.num_layers) return -1;
  for (int k : by_layer_[LayerSlot(tensor, layer)]) {
    const Region& r = regions_[k];
    if (block >= r.first_block && block < r.first_block + r.num_blocks) return k;
  }
  return -1;
}

std::vector<RegionCopies> LeasePlan::Copies(v1::KvTensor tensor, int layer, int first, int last,
                                            std::span<const int32_t> local_blocks) const {
  std::vector<RegionCopies> out;
  for (int i = std::max(first, first_shipped_); i < last; ++i) {
    const int32_t remote = remote_blocks_[i];
    const int k = Find(tensor, layer, remote);  // Create checked that it exists
    const Region& r = regions_[k];
    const kvtransfer::CopyOp op{
        local_.offset(layer, local_blocks[i]),
        static_cast<uint64_t>(layer - r.first_layer) * r.layer_stride_bytes +
            static_cast<uint64_t>(remote - r.first_block) * local_.block_bytes,
        local_.block_bytes};
    auto group =
        std::find_if(out.begin(), out.end(), [k](const RegionCopies& g) { return g.region == k; });
    if (group == out.end()) {
      out.push_back(RegionCopies{k, {op}});
      continue;
    }
    kvtransfer::CopyOp& prev = group->copies.back();
    if (prev.local_offset + prev.bytes == op.local_offset &&
        prev.remote_offset + prev.bytes == op.remote_offset) {
      prev.bytes += op.bytes;
    } else {
      group->copies.push_back(op);
    }
  }
  return out;
}

}  // namespace dq::prefill
