// Qwen3 dense: the Llama layer plus an RMSNorm over each head of q and k before RoPE.
#pragma once

#include "engine/model/architecture.h"

namespace dq {

const Architecture& Qwen3Architecture();

}  // namespace dq
