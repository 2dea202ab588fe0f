// Llama (and SmolLM2): pre-norm decoder, GQA attention with RoPE, SwiGLU MLP.
#pragma once

#include "common/status.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/decoder_weights.h"
#include "engine/model/model_config.h"
#include "engine/model/tensor_names.h"

namespace dq {

// Binds the Llama tensors of `checkpoint` (GGUF or HF names). Weights stay in the mapping.
absl::StatusOr<DecoderWeights> LoadLlamaWeights(const Checkpoint& checkpoint,
                                                const ModelConfig& config);

// The part every Llama-family layer has; other architectures add their tensors on top.
absl::Status BindLlamaLayer(const class WeightBinder& binder, const TensorNames& names,
                            const ModelConfig& config, int layer, DecoderLayerWeights* out);
absl::Status BindEmbeddingsAndHead(const WeightBinder& binder, const TensorNames& names,
                                   const ModelConfig& config, DecoderWeights* out);

}  // namespace dq
