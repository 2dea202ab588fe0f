// The forward pass of one phase's model on one backend (the CPU's DecoderModel, engine/cuda's
// CudaDecoderModel). A ModelRunner holds one per phase; both phases share the KV cache whose
// blocks the runner's KvBlockPool hands out.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/batch.h"
#include "engine/model/model_config.h"

namespace dq {

// Optional callbacks during one forward pass. They run on the calling thread between layers, so
// they must be quick (post a transfer, not wait for it).
struct ForwardHooks {
  // Called once per layer as soon as that layer's K/V for every new token of the batch is in the
  // pool (before the layer's MLP runs): a prefill worker ships the layer's KV pages from here, so
  // the transfer overlaps the rest of the forward pass. On a device backend the KV write is
  // enqueued on the device stream at that point, not yet complete.
  std::function<void(int layer)> on_layer_kv_written;
};

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual const ModelConfig& config() const = 0;
  // "cpu" or "cuda".
  virtual std::string_view backend() const = 0;

  // Runs `batch`: writes each item's new K/V into the cache at the blocks `pool` assigned and
  // advances kv->num_tokens; fills `logits` (host memory). Preconditions (checked, error on
  // violation): every item has blocks for its new tokens, token ids are in the vocabulary,
  // positions stay below max_context. Mutates the KV cache and the batch's sequences only.
  virtual absl::Status Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                               BatchLogits* logits, const ForwardHooks& hooks) const = 0;
};

}  // namespace dq
