// Gemma 3 (text): sandwich norms (RMSNorm before and after both attention and MLP), QK-norm,
// GeGLU, the embedding scaled by sqrt(hidden), and five sliding-window layers per global one,
// the local layers with their own RoPE base. Every RMSNorm multiplies by (1 + w).
#pragma once

#include "engine/model/architecture.h"

namespace dq {

const Architecture& Gemma3Architecture();

}  // namespace dq
