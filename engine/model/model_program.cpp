#include "engine/model/model_program.h"

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

ProgramLayer AttentionMlpLayer(AttentionBlock attention, MlpBlock mlp) {
  ProgramLayer l;
  l.blocks.emplace_back(std::move(attention));
  l.blocks.emplace_back(std::move(mlp));
  return l;
}

}  // namespace dq
