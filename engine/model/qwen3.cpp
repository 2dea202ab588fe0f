#include "engine/model/qwen3.h"

namespace dq {
namespace {

absl::StatusOr<ModelProgram> Bind(const WeightBinder& binder, const TensorNames& names,
                                  const ModelConfig& c) {
  ModelProgram p;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, c, &p));
  for (int i = 0; i < c.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, c, i, true));
    DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, c, i));
    p.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  return p;
}

}  // namespace

const Architecture& Qwen3Architecture() {
  static const Architecture kQwen3{
      // GGUF files of Qwen3 keep HF's (i, i + d/2) RoPE pairing: nothing to configure.
      "qwen3",
      {"qwen3", "Qwen3ForCausalLM"},
      "Qwen3ForCausalLM",
      nullptr,
      &Bind};
  return kQwen3;
}

}  // namespace dq
