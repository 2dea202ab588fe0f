#include "engine/model/llama.h"

#include "engine/model/weight_binder.h"

namespace dq {

absl::Status BindLlamaLayer(const WeightBinder& binder, const TensorNames& names,
                            const ModelConfig& c, int i, DecoderLayerWeights* l) {
  auto name = [&](const char* role) { return names.Layer(i, role); };
  DQ_ASSIGN_OR_RETURN(l->attn_norm, binder.Vector(name("attn_norm"), c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->ffn_norm, binder.Vector(name("ffn_norm"), c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->q, binder.Matrix(name("attn_q"), c.q_dim(), c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->k, binder.Matrix(name("attn_k"), c.kv_dim(), c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->v, binder.Matrix(name("attn_v"), c.kv_dim(), c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->o, binder.Matrix(name("attn_output"), c.hidden_size, c.q_dim()));
  DQ_ASSIGN_OR_RETURN(l->gate, binder.Matrix(name("ffn_gate"), c.intermediate_size, c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->up, binder.Matrix(name("ffn_up"), c.intermediate_size, c.hidden_size));
  DQ_ASSIGN_OR_RETURN(l->down, binder.Matrix(name("ffn_down"), c.hidden_size, c.intermediate_size));
  return absl::OkStatus();
}

absl::Status BindEmbeddingsAndHead(const WeightBinder& binder, const TensorNames& names,
                                   const ModelConfig& c, DecoderWeights* w) {
  DQ_ASSIGN_OR_RETURN(w->embedding, binder.Matrix(names.Embedding(), c.vocab_size, c.hidden_size));
  DQ_ASSIGN_OR_RETURN(w->final_norm, binder.Vector(names.FinalNorm(), c.hidden_size));
  // Some tied checkpoints still store lm_head; an untied one must.
  if (binder.Has(names.LmHead())) {
    DQ_ASSIGN_OR_RETURN(w->lm_head, binder.Matrix(names.LmHead(), c.vocab_size, c.hidden_size));
  } else if (c.tie_word_embeddings) {
    w->lm_head = w->embedding;
  } else {
    return absl::NotFoundError(absl::StrCat("checkpoint has no '", names.LmHead(),
                                            "' and the config does not tie embeddings"));
  }
  return absl::OkStatus();
}

absl::StatusOr<DecoderWeights> LoadLlamaWeights(const Checkpoint& checkpoint,
                                                const ModelConfig& config) {
  const WeightBinder binder(checkpoint, config.quant);
  const TensorNames names(checkpoint.format() == "gguf");
  DecoderWeights w;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, config, &w));
  w.layers.resize(config.num_layers);
  for (int i = 0; i < config.num_layers; ++i) {
    DQ_RETURN_IF_ERROR(BindLlamaLayer(binder, names, config, i, &w.layers[i]));
  }
  return w;
}

}  // namespace dq
