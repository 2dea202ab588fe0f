#include "engine/model/qwen3.h"

#include "engine/model/llama.h"
#include "engine/model/weight_binder.h"

namespace dq {

absl::StatusOr<DecoderWeights> LoadQwen3Weights(const Checkpoint& checkpoint,
                                                const ModelConfig& config) {
  const WeightBinder binder(checkpoint, config.quant);
  const TensorNames names(checkpoint.format() == "gguf");
  DecoderWeights w;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, config, &w));
  w.layers.resize(config.num_layers);
  for (int i = 0; i < config.num_layers; ++i) {
    DecoderLayerWeights& l = w.layers[i];
    DQ_RETURN_IF_ERROR(BindLlamaLayer(binder, names, config, i, &l));
    DQ_ASSIGN_OR_RETURN(l.q_norm, binder.Vector(names.Layer(i, "attn_q_norm"), config.head_dim));
    DQ_ASSIGN_OR_RETURN(l.k_norm, binder.Vector(names.Layer(i, "attn_k_norm"), config.head_dim));
  }
  return w;
}

}  // namespace dq
