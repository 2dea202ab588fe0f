#include "engine/model/model_program.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dq {

SequenceStateSpec ModelProgram::Finalize() {
  int kv = 0, recurrent = 0;
  int64_t offset = 0;
  for (ProgramLayer& l : layers) {
    for (Block& b : l.blocks) {
      if (auto* a = std::get_if<AttentionBlock>(&b)) a->kv_layer = kv++;
      if (auto* g = std::get_if<GatedDeltaBlock>(&b)) {
        g->state_layer = recurrent++;
        g->state_offset = offset;
        offset += g->state_floats();
      }
    }
  }
  return state();
}

SequenceStateSpec ModelProgram::state() const {
  SequenceStateSpec s;
  for (size_t i = 0; i < layers.size(); ++i) {
    for (const Block& b : layers[i].blocks) {
      if (std::holds_alternative<AttentionBlock>(b)) {
        ++s.kv_layers;
        s.kv_layer_ids.push_back(static_cast<int>(i));
      }
      if (const auto* g = std::get_if<GatedDeltaBlock>(&b)) {
        ++s.recurrent_layers;
        s.slot_floats += g->state_floats();
        s.recurrent_layer_ids.push_back(static_cast<int>(i));
        s.recurrent_layer_floats.push_back(g->state_floats());
      }
    }
  }
  return s;
}

absl::Status ModelProgram::RequireLlamaBlocks(std::string_view backend) const {
  const char* what = embedding_scale != 1.0f ? "a scaled embedding" : nullptr;
  for (size_t i = 0; i < layers.size() && what == nullptr; ++i) {
    for (const Block& b : layers[i].blocks) {
      const bool extended = std::visit([](const auto& blk) { return blk.extended(); }, b);
      if (std::holds_alternative<GatedDeltaBlock>(b)) {
        what = "Gated DeltaNet (linear attention) blocks (Qwen3.5)";
        break;
      }
      if (extended) {
        what =
            "sandwich norms, sliding-window attention, local RoPE or GeGLU (Gemma 3), or an "
            "attention output gate or partial RoPE (Qwen3.5)";
      }
    }
  }
  if (what == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this model's layers have ", what, ", which the ", std::string(backend),
                   " backend does not run yet; run it on the CPU backend"));
}

ProgramLayer AttentionMlpLayer(AttentionBlock attention, MlpBlock mlp) {
  ProgramLayer l;
  l.blocks.emplace_back(std::move(attention));
  l.blocks.emplace_back(std::move(mlp));
  return l;
}

}  // namespace dq
