#include "engine/model/model_program.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dq {

SequenceStateSpec ModelProgram::Finalize() {
  int kv = 0;
  for (ProgramLayer& l : layers) {
    for (Block& b : l.blocks) {
      if (auto* a = std::get_if<AttentionBlock>(&b)) a->kv_layer = kv++;
    }
  }
  return state();
}

SequenceStateSpec ModelProgram::state() const {
  SequenceStateSpec s;
  for (const ProgramLayer& l : layers) {
    for (const Block& b : l.blocks) s.kv_layers += std::holds_alternative<AttentionBlock>(b);
  }
  return s;
}

absl::Status ModelProgram::RequireLlamaBlocks(std::string_view backend) const {
  const char* what = embedding_scale != 1.0f ? "a scaled embedding" : nullptr;
  for (size_t i = 0; i < layers.size() && what == nullptr; ++i) {
    for (const Block& b : layers[i].blocks) {
      const bool extended = std::visit([](const auto& blk) { return blk.extended(); }, b);
      if (extended) what = "sandwich norms, sliding-window attention, local RoPE or GeGLU";
    }
  }
  if (what == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this model's layers have ", what, " (Gemma 3), which the ",
                   std::string(backend), " backend does not run yet; run it on the CPU backend"));
}

ProgramLayer AttentionMlpLayer(AttentionBlock attention, MlpBlock mlp) {
  ProgramLayer l;
  l.blocks.emplace_back(std::move(attention));
  l.blocks.emplace_back(std::move(mlp));
  return l;
}

}  // namespace dq
