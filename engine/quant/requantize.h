// A linear layer quantized again at load time into a weight-only scheme: the decode worker's
// optional quantized lm_head ([decode] lm_head, docs/fidelity.md), whose bf16 copy is 41 % of a
// 2-bit Qwen3-4B decode step's bytes.
#pragma once

#include <string>
#include <string_view>

#include "common/lm_head_format.h"
#include "common/status.h"
#include "engine/model/linear_weight.h"

namespace dq {

// `w` (any stored dtype, GGUF block or scheme) dequantized to fp32 and quantized into `format`
// (common/lm_head_format.h; not "bf16"), weight-only. The result owns its bytes. InvalidArgument
// when no group size divides w.in_features.
absl::StatusOr<LinearWeight> RequantizeLinear(const LinearWeight& w, std::string_view format);

}  // namespace dq
