// The configuration of a DFlash block-diffusion drafter in its published checkpoint layout
// (z-lab's DFlashDraftModel, docs/speculative.md#dflash): a few Qwen3-style layers, `fc` over the
// concatenated hidden states of chosen target layers, a block size and a mask token. The drafter
// has no embeddings or lm_head of its own: it uses the target's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace dq {

struct DFlashConfig {
  // The drafter's layers: hidden size, heads, MLP size, RoPE, eps, and how its weights are
  // stored (quant). vocab_size is the target's (the drafter reads the target's embeddings).
  ModelConfig layers;
  std::vector<int> target_layer_ids;  // target layers whose outputs `fc` reads, in this order
  int block_size = 16;                // one anchor token + block_size - 1 masked positions
  int32_t mask_token_id = -1;         // the embedding row fed at the masked positions
  int num_target_layers = 0;          // the target the drafter was made for (0: not stated)
};

// Parses config.json. Keys are looked up in `dflash_config` first, then at the top level (both
// occur in published checkpoints). Errors name the key; variants this build does not run
// (sliding-window or causal draft attention, DFlash2's candidate selector and convolutions,
// logit multipliers or soft-capping, embedding scales, attention bias) are Unimplemented.
absl::StatusOr<DFlashConfig> DFlashConfigFromJson(const nlohmann::json& config);
// Reads `<dir>/config.json`.
absl::StatusOr<DFlashConfig> ReadDFlashConfig(const std::string& dir);

// Whether the drafter fits `target`: same hidden size and vocabulary, the mask token inside it,
// every target layer id in [0, target layers), the target's layer count when the config states
// it. InvalidArgument naming the mismatch and what to do.
absl::Status CheckDFlashTarget(const DFlashConfig& config, const ModelConfig& target);

}  // namespace dq
