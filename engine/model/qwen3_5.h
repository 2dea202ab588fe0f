// Qwen3.5 (text; HF Qwen3_5ForCausalLM, model_type qwen3_5_text): a hybrid of Gated DeltaNet
// (linear attention) layers and full-attention layers (three to one by default,
// full_attention_interval 4, or config.json's layer_types). Full attention has an output gate
// (q_proj doubled, sigmoid), per-head QK-norm and partial RoPE (partial_rotary_factor of
// head_dim); every RMSNorm but the GDN's gated one is zero-centred (1 + w, folded at bind).
#pragma once

#include "engine/model/architecture.h"

namespace dq {

const Architecture& Qwen3_5Architecture();

}  // namespace dq
