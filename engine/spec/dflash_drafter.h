// The DFlash block-diffusion drafter (docs/speculative.md#dflash): a few Qwen3-style layers that
// draft a whole block in one forward pass. The block is [last token, mask x (block_size - 1)]
// at the next positions; its queries attend, without a causal mask, to the block itself and to
// the context: every earlier position's target hidden states (the outputs of the configured
// target layers, concatenated, through `fc` and `hidden_norm`), projected by each draft layer's
// k/v (k_norm, RoPE at the context token's own position). The block's hidden states go through
// `norm` and the target's lm_head; position j's argmax is draft token j (j = 1 .. block_size - 1).
//
// The context K/V is kept in the drafter's own paged KV pool (computed once per kept token); the
// block's K/V is written after it for the pass and cut off again. The target's hidden states
// arrive through ObserveTarget for the tokens the target kept, so a rejected draft never enters
// the context and Accept has nothing to roll back. Drafting is greedy (a point mass).
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/thread_pool.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/model_program.h"
#include "engine/spec/dflash_config.h"
#include "engine/spec/drafter.h"

namespace dq {

struct DFlashDrafterOptions {
  int threads = 0;         // 0: one per hardware thread
  int kv_capacity = 0;     // context tokens the drafter's KV pool holds in all; 0: min(ctx, 8192)
  int kv_block_size = 16;  // tokens per block of the drafter's pool
};

// The drafter's weights: its own layers, `fc`, the norms, and the target's embeddings and
// lm_head (bound in place from the target's checkpoint).
struct DFlashWeights {
  LinearWeight fc;  // [hidden, target layers * hidden]
  std::vector<float> hidden_norm;
  std::vector<float> norm;
  // Its layers as a model program's (attention + MLP, q/k norms); their attention runs
  // non-causally over the context and the block (see the class comment).
  std::vector<ProgramLayer> layers;
  LinearWeight embedding;        // the target's [vocab, hidden]
  LinearWeight lm_head;          // the target's [vocab, hidden]
  std::vector<float> last_norm;  // the target's final norm (see DFlashDrafter::ObserveTarget)
};

class DFlashDrafter : public Drafter {
 public:
  // Binds `draft` (laid out as published: fc.weight, hidden_norm.weight, norm.weight,
  // layers.N.{input_layernorm,post_attention_layernorm,self_attn.{q,k,v,o}_proj,
  // self_attn.{q,k}_norm,mlp.{gate,up,down}_proj}.weight, quantized or not) and the target's
  // embeddings, lm_head and final norm from `target`. Both checkpoints must outlive the drafter.
  // Errors: the config does not fit the target (CheckDFlashTarget), a tensor is missing or has
  // the wrong shape (the message names it).
  static absl::StatusOr<std::unique_ptr<DFlashDrafter>> Create(const Checkpoint& draft,
                                                               const DFlashConfig& config,
                                                               const Checkpoint& target,
                                                               const ModelConfig& target_config,
                                                               const DFlashDrafterOptions& options);
  // ReadDFlashConfig(dir) and Create over the safetensors in `dir`; *checkpoint receives them.
  static absl::StatusOr<std::unique_ptr<DFlashDrafter>> Load(
      const std::string& dir, const Checkpoint& target, const ModelConfig& target_config,
      const DFlashDrafterOptions& options, std::unique_ptr<Checkpoint>* checkpoint);

  std::string_view name() const override { return "dflash"; }
  bool deterministic() const override { return true; }
  absl::Status CheckTarget(const ModelConfig& target) const override;
  int max_draft_tokens() const override { return config_.block_size - 1; }
  std::span<const int> target_layers() const override { return config_.target_layer_ids; }

  absl::Status Begin(uint64_t sequence, std::span<const int32_t> prompt) override;
  void End(uint64_t sequence) override;
  // Appends the kept tokens' features to the sequence's context. A target layer that is the
  // target's last is read after the target's final norm, as the published drafters were trained
  // (HF's last hidden state). Features that leave a gap in the positions (a caller that skipped
  // some) stop drafting for the sequence: it then decodes plainly, never wrongly.
  void ObserveTarget(uint64_t sequence, int first, int count,
                     std::span<const float> features) override;
  // One block forward for all sequences whose context reaches their last history token.
  absl::Status Propose(std::span<const DraftRequest> requests, std::span<Draft> drafts) override;

  // The context K/V of prompt positions, computed where the target's prefill ran (a prefill
  // worker) instead of from ObserveTarget here: docs/speculative.md, "Disaggregation".
  struct ContextChunk {
    KvSequence* kv = nullptr;         // blocks of kv_pool() covering [first, first + count)
    int first = 0;                    // the chunk's first position
    std::span<const float> features;  // [count, target_layers() x hidden], as ObserveTarget's
  };
  // Writes each chunk's context K/V into its blocks, exactly as Propose would compute it from
  // the same features (fc, hidden_norm, each layer's k/v projection, k_norm, RoPE), one layer
  // after the other; `on_layer(layer)` runs once that layer's K/V of every chunk is in the pool.
  // Sets each kv's num_tokens to first + count. Errors: features of the wrong size, blocks that
  // do not cover the chunk.
  absl::Status WriteContext(std::span<const ContextChunk> chunks,
                            const std::function<void(int layer)>& on_layer);
  // Begin with a context of `tokens` positions whose K/V `land` copies into the sequence's new
  // blocks (what WriteContext wrote elsewhere). ResourceExhausted when the pool has no room;
  // land's error. Either way the sequence is then unknown (no drafts for it).
  absl::Status BeginWithContext(uint64_t sequence, int tokens,
                                const std::function<absl::Status(const KvSequence&)>& land);

  // The raw draft logits of one block for `sequence` (whose context covers positions
  // [0, position)) anchored on `anchor` at `position`: block_size - 1 rows of vocab_size, row j
  // for block position j + 1. The context stays; the block is not kept. For the reference test.
  absl::StatusOr<std::vector<float>> BlockLogits(uint64_t sequence, int32_t anchor, int position);

  const DFlashConfig& config() const { return config_; }
  KvBlockPool& kv_pool() { return pool_; }
  // Context tokens cached for `sequence` (features projected into the KV pool or pending).
  int context_tokens(uint64_t sequence) const;

 private:
  struct State {
    KvSequence kv;               // context K/V for positions [0, kv.num_tokens)
    std::vector<float> pending;  // fc inputs of positions [kv.num_tokens, + pending rows)
    bool broken = false;         // a gap in the features: draft nothing more
  };
  // One sequence's block in a forward pass.
  struct Item {
    State* state = nullptr;
    int32_t anchor = 0;
    int position = 0;  // the anchor's position (= the context's length)
    int rows = 0;      // logits rows wanted (block positions 1 .. rows)
  };
  struct Scratch;
  using RowPositions = std::vector<std::pair<KvSequence*, int>>;  // each row's blocks, position

  DFlashDrafter(DFlashConfig config, ModelConfig target, DFlashWeights weights,
                const DFlashDrafterOptions& options);
  int pending_rows(const State& s) const;
  // Whether `s` can draft a block at `position`: context complete, KV room; reserves the blocks.
  bool Ready(State& s, int position);
  // Runs the items' blocks; `logits` gets each item's rows in order.
  absl::Status Forward(std::span<Item> items, std::vector<float>* logits);
  void ProjectContext(std::span<Item> items, Scratch& s);
  // fc + hidden_norm over `rows` feature rows (s.ctx).
  void ProjectFeatures(const float* features, int64_t rows, Scratch& s);
  // The target's last layer is read after the target's final norm (in place, `count` rows).
  void NormalizeFeatures(float* features, int count) const;
  // Layer `layer`'s K/V of `rows` inputs into the pool at `where` (k_norm, RoPE).
  void WriteKv(int layer, const float* in, int64_t rows, const RowPositions& where, Scratch& s);
  void Layer(int layer, Scratch& s);

  DFlashConfig config_;
  ModelConfig target_;
  DFlashWeights weights_;
  int context_limit_ = 0;
  std::vector<float> inv_freq_;
  KvBlockPool pool_;
  ThreadPool threads_;
  std::unordered_map<uint64_t, State> states_;
};

}  // namespace dq
