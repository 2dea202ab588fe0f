// The forward pass of one phase's model on one backend (the CPU's DecoderModel, engine/cuda's
// CudaDecoderModel). A ModelRunner holds one per phase; both phases share the KV cache whose
// blocks the runner's KvBlockPool hands out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  // Called once per recurrent (Gated DeltaNet) block as soon as its state in every sequence's
  // state slot has taken the batch's new tokens, with the block's index among them
  // (GatedDeltaBlock::state_layer): a prefill worker ships the layer's part of the slot from
  // here once a prompt's last chunk has run. Later blocks of the pass do not touch that part.
  std::function<void(int state_layer)> on_layer_state_written;
  // Taps: the outputs of the layers in `tap_layers` (the residual stream after the layer's last
  // block) for every new token of the batch, in batch order: [tokens, hidden_size] fp32 on the
  // host, one call per tapped layer in ascending order. A drafter conditioned on the target's
  // hidden states (DFlash) copies the layers it reads from here. The CPU backend calls it between
  // layers; a device backend copies only the tapped layers out and calls it once the pass has
  // finished, before Forward returns. Layers outside [0, num_layers) are ignored.
  std::vector<int> tap_layers;
  std::function<void(int layer, std::span<const float> hidden)> on_layer_output;
};

// The tapped layers of one pass (ForwardHooks::tap_layers), ascending and each once; empty
// without an on_layer_output callback.
class TapSet {
 public:
  TapSet(const ForwardHooks& hooks, int num_layers) {
    if (!hooks.on_layer_output) return;
    for (int l : hooks.tap_layers) {
      if (l >= 0 && l < num_layers) layers_.push_back(l);
    }
    std::sort(layers_.begin(), layers_.end());
    layers_.erase(std::unique(layers_.begin(), layers_.end()), layers_.end());
  }
  bool has(int layer) const { return std::binary_search(layers_.begin(), layers_.end(), layer); }
  bool empty() const { return layers_.empty(); }
  const std::vector<int>& layers() const { return layers_; }
  // Which of the tapped layers `layer` is (its slot in a tap buffer); -1 when not tapped.
  int slot(int layer) const {
    auto it = std::lower_bound(layers_.begin(), layers_.end(), layer);
    return it != layers_.end() && *it == layer ? static_cast<int>(it - layers_.begin()) : -1;
  }

 private:
  std::vector<int> layers_;
};

// How one batch item's next token is drawn on the device: the CPU Sampler's parameters (no
// penalties; see Sampler::DeviceSamplable) and the uniform the item's Sampler drew on the host
// (Sampler::DrawUniform), so a seeded sequence keeps its random stream wherever it samples.
struct DeviceSampling {
  float temperature = 1.0f;  // below kGreedyTemperature (sampler.h): argmax, lowest id on ties
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  double uniform = 0.0;      // in [0, 1)
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

  // Whether ForwardSample is implemented (the logits stay on the device and only token ids
  // come back).
  virtual bool SupportsDeviceSampling() const { return false; }

  // Forward, then one token per item picked where the logits are: the token the CPU Sampler's
  // Sample() would give from the same logits with per_item[i]'s parameters and uniform (up to
  // the draw's rounding at near ties). Mutates the KV cache exactly as Forward does.
  // Preconditions (error on violation): Forward's; no item is all_logits (one logits row each);
  // per_item and out_tokens have one entry per item. out_tokens[i] is item i's token.
  // Default: Unimplemented.
  virtual absl::Status ForwardSample(const Batch& /*batch*/, KvBlockPool& /*pool*/,
                                     ThreadPool& /*threads*/,
                                     std::span<const DeviceSampling> /*per_item*/,
                                     std::span<int32_t> /*out_tokens*/,
                                     const ForwardHooks& /*hooks*/) const {
    return absl::UnimplementedError(absl::StrCat(
        "the ", std::string(backend()), " backend does not sample on the device; use Forward"));
  }
};

}  // namespace dq
