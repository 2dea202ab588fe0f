// Writes a DFlash drafter checkpoint with random weights in the published layout
// (dflash_config.h) for a given target: tests and the PyTorch reference need no downloads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace dq {

struct RandomDFlashOptions {
  int layers = 1;
  std::vector<int> target_layer_ids;  // empty: first, middle and last target layer
  int block_size = 8;
  int32_t mask_token_id = -1;  // -1: the target's last vocabulary id
  int heads = 0;               // 0: the target's (likewise the three below)
  int kv_heads = 0;
  int head_dim = 0;
  int intermediate = 0;
  uint64_t seed = 1;
  bool f32 = false;  // bf16 otherwise
};

// config.json + model.safetensors in `dir` (created). The weights' scales keep activations O(1)
// so that the drafter's logits spread (no near-ties in the argmax). Errors: a bad option (the
// message names it), an unwritable directory.
absl::Status WriteRandomDFlashCheckpoint(const ModelConfig& target, const RandomDFlashOptions& o,
                                         const std::string& dir);

}  // namespace dq
