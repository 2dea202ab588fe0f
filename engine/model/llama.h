// Llama (and SmolLM2): pre-norm decoder, GQA attention with RoPE, SwiGLU MLP.
#pragma once

#include "engine/model/architecture.h"

namespace dq {

const Architecture& LlamaArchitecture();

}  // namespace dq
