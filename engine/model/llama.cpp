#include "engine/model/llama.h"

namespace dq {
namespace {

// llama.cpp's converter permutes Llama's q/k rows so that adjacent pairs rotate.
void Configure(ModelConfig& c, bool gguf) {
  if (gguf) c.rope_style = RopeStyle::kInterleaved;
}

absl::StatusOr<ModelProgram> Bind(const WeightBinder& binder, const TensorNames& names,
                                  const ModelConfig& c) {
  ModelProgram p;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, c, &p));
  for (int i = 0; i < c.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, c, i, false));
    DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, c, i));
    p.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  return p;
}

}  // namespace

const Architecture& LlamaArchitecture() {
  static const Architecture kLlama{
      "llama", {"llama", "LlamaForCausalLM"}, "LlamaForCausalLM", &Configure, &Bind};
  return kLlama;
}

}  // namespace dq
