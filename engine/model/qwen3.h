// Qwen3 dense: the Llama layer plus an RMSNorm over each head of q and k before RoPE.
#pragma once

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/decoder_weights.h"
#include "engine/model/model_config.h"

namespace dq {

absl::StatusOr<DecoderWeights> LoadQwen3Weights(const Checkpoint& checkpoint,
                                                const ModelConfig& config);

}  // namespace dq
