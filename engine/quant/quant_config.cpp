#include "engine/quant/quant_config.h"

#include <regex>

#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

absl::StatusOr<QuantConfig> FromCompressedTensors(const nlohmann::json& q) {
  QuantConfig c;
  c.method = "compressed-tensors";
  const std::string format = q.value("format", "");
  if (format == "nvfp4-pack-quantized") {
    c.scheme = "nvfp4";
    c.group_size = 16;
  } else if (format == "float-quantized" || format == "naive-quantized") {
    c.scheme = "fp8";
  } else {
    return absl::UnimplementedError(
        absl::StrCat("compressed-tensors format '", format,
                     "' is not supported; supported: nvfp4-pack-quantized, float-quantized"));
  }
  if (q.contains("ignore") && q["ignore"].is_array()) {
    c.ignore = q["ignore"].get<std::vector<std::string>>();
  }
  return c;
}

absl::StatusOr<QuantConfig> FromGptq(const nlohmann::json& q, const std::string& method) {
  QuantConfig c;
  c.method = method;
  const int bits = q.value("bits", q.value("w_bit", 0));
  if (bits != 4) {
    return absl::UnimplementedError(absl::StrCat(method, " checkpoints with ", bits,
                                                 "-bit weights are not supported; only 4-bit"));
  }
  c.scheme = "int4";
  c.group_size = q.value("group_size", q.value("q_group_size", 128));
  c.sym = q.value("sym", false);
  // desc_act (act-order): the importer maps g_idx onto contiguous groups where it can and
  // says clearly when it cannot.
  if (q.contains("modules_to_not_convert") && q["modules_to_not_convert"].is_array()) {
    c.ignore = q["modules_to_not_convert"].get<std::vector<std::string>>();
  }
  return c;
}

}  // namespace

bool QuantConfig::IsQuantized(const std::string& prefix) const {
  if (!quantized()) return false;
  for (const std::string& pattern : ignore) {
    if (pattern.rfind("re:", 0) == 0) {
      if (std::regex_match(prefix, std::regex(pattern.substr(3)))) return false;
    } else if (pattern == prefix) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<QuantConfig> QuantConfig::FromHfConfig(const nlohmann::json& config) {
  if (!config.contains("quantization_config") || config["quantization_config"].is_null()) {
    return QuantConfig{};
  }
  const nlohmann::json& q = config["quantization_config"];
  const std::string method = q.value("quant_method", "");
  try {
    if (method == "compressed-tensors") return FromCompressedTensors(q);
    if (method == "gptq" || method == "awq") return FromGptq(q, method);
    if (method == "dqserve") {
      QuantConfig c;
      c.method = method;
      c.scheme = q.at("format").get<std::string>();
      c.group_size = q.value("group_size", 0);
      if (q.contains("ignore")) c.ignore = q["ignore"].get<std::vector<std::string>>();
      DQ_RETURN_IF_ERROR(FindWeightCodec(c.scheme).status());
      return c;
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("quantization_config: ", e.what()));
  }
  return absl::UnimplementedError(
      absl::StrCat("quantization method '", method,
                   "' is not supported; supported: dqserve, compressed-tensors, gptq, awq"));
}

nlohmann::json QuantConfig::ToJson() const {
  return {{"quant_method", "dqserve"},
          {"format", scheme},
          {"group_size", group_size},
          {"ignore", ignore}};
}

}  // namespace dq
