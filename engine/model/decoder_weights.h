// Weights of a pre-norm decoder-only transformer (Llama family: GQA attention + SwiGLU MLP).
#pragma once

#include <vector>

#include "engine/model/linear_weight.h"

namespace dq {

struct DecoderLayerWeights {
  std::vector<float> attn_norm;
  std::vector<float> ffn_norm;
  std::vector<float> q_norm;  // Qwen3 only: [head_dim], shared by all heads
  std::vector<float> k_norm;
  LinearWeight q, k, v, o;
  LinearWeight gate, up, down;
};

struct DecoderWeights {
  LinearWeight embedding;  // [vocab, hidden]; rows are looked up, not multiplied
  std::vector<float> final_norm;
  LinearWeight lm_head;  // [vocab, hidden]; a copy of `embedding`'s view when tied
  std::vector<DecoderLayerWeights> layers;
};

}  // namespace dq
