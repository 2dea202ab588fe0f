// A checkpoint's quantization metadata (config.json "quantization_config"), in the dialects we
// read: our own ("dqserve"), compressed-tensors (nvfp4-pack-quantized, float-quantized), GPTQ
// and AWQ.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace dq {

struct QuantConfig {
  std::string scheme;  // our codec name ("nvfp4", "fp8", "int4", ...); empty: not quantized
  int group_size = 0;
  std::string method;  // "dqserve", "compressed-tensors", "gptq" or "awq"
  bool sym = false;    // gptq: symmetric
  // Module names (e.g. "lm_head", "model.embed_tokens") or "re:<regex>" patterns kept in
  // high precision.
  std::vector<std::string> ignore;

  bool quantized() const { return !scheme.empty(); }
  // Whether the module `prefix` ("model.layers.0.mlp.up_proj") holds quantized weights.
  bool IsQuantized(const std::string& prefix) const;
  // Parses config["quantization_config"] (absent: not quantized). Unknown methods or formats
  // are errors that say which are supported.
  static absl::StatusOr<QuantConfig> FromHfConfig(const nlohmann::json& config);
  // Our own dialect, for checkpoints that dq-quantize writes.
  nlohmann::json ToJson() const;
};

}  // namespace dq
