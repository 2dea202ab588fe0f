// What an HF checkpoint written from a GGUF source (dq-quantize) needs for architectures whose
// llama.cpp conventions differ from HF's beyond names: Gemma 3 (1 + w norms) and Qwen3.5 (1 + w
// norms, -exp(A_log), the squeezed conv, tiled value heads). Each architecture file defines its
// own; the Llama layer needs none (its GGUF values are HF's, q/k rows aside, which config.json
// records).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace dq {

struct HfFromGguf {
  // Adds the architecture's own fields to config.json (HfConfigJson's Llama fields written),
  // so that ModelConfigFromHfJson reads `c` back.
  void (*config)(const ModelConfig& c, nlohmann::json& j) = nullptr;
  // A vector of `role` (TensorNames' roles; "output_norm": the final norm) in HF's convention
  // and shape, from its GGUF values and shape.
  absl::Status (*vector)(const ModelConfig& c, std::string_view role, std::vector<float>& v,
                         std::vector<int64_t>& shape) = nullptr;
  // A linear layer's [out, in] values of `role` in HF's row and column order; null: the same.
  void (*linear)(const ModelConfig& c, std::string_view role, std::vector<float>& w, int64_t out,
                 int64_t in) = nullptr;
};

// `architecture`'s conversion (an Architecture::name); null: its GGUF values are HF's.
const HfFromGguf* FindHfFromGguf(std::string_view architecture);

// Defined by the architecture files.
const HfFromGguf& Gemma3HfFromGguf();
const HfFromGguf& Qwen3_5HfFromGguf();

}  // namespace dq
