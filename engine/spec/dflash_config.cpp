#include "engine/spec/dflash_config.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_join.h"

namespace dq {
namespace {

// dflash_config.<key>, else the top-level <key>, else null.
const nlohmann::json* Lookup(const nlohmann::json& j, const char* key) {
  if (j.contains("dflash_config") && j["dflash_config"].is_object() &&
      j["dflash_config"].contains(key) && !j["dflash_config"][key].is_null()) {
    return &j["dflash_config"][key];
  }
  if (j.contains(key) && !j[key].is_null()) return &j[key];
  return nullptr;
}

absl::StatusOr<int64_t> IntKey(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = Lookup(j, key);
  if (v == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("dflash config.json: '", key,
                                                   "' is missing (in dflash_config or at the top "
                                                   "level); is this a DFlash drafter checkpoint?"));
  }
  if (!v->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dflash config.json: '", key, "' must be an integer, got ", v->dump()));
  }
  return v->get<int64_t>();
}

// Variants of the published family whose numerics this build does not reproduce.
absl::Status CheckSupported(const nlohmann::json& j) {
  auto unsupported = [](const std::string& what) {
    return absl::UnimplementedError(
        absl::StrCat("dflash config.json: ", what,
                     " is not supported yet; only the plain DFlash drafter (non-causal full "
                     "attention over the block, no logit transforms) runs"));
  };
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"]) {
      if (a.is_string() && a.get<std::string>() != "DFlashDraftModel") {
        return unsupported(absl::StrCat("architecture '", a.get<std::string>(), "'"));
      }
    }
  }
  if (j.value("attention_bias", false)) return unsupported("attention_bias");
  if (j.contains("is_causal") && j["is_causal"].is_boolean() && j["is_causal"].get<bool>()) {
    return unsupported("is_causal = true");
  }
  if (j.value("use_sliding_window", false)) return unsupported("use_sliding_window");
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) {
      if (t != "full_attention") return unsupported(absl::StrCat("layer type ", t.dump()));
    }
  }
  for (const char* key : {"output_multiplier", "input_embedding_scale"}) {
    const nlohmann::json* v = Lookup(j, key);
    if (v != nullptr && (!v->is_number() || v->get<double>() != 1.0)) return unsupported(key);
  }
  const nlohmann::json* cap = Lookup(j, "final_logit_softcapping");
  if (cap != nullptr && (!cap->is_number() || cap->get<double>() > 0)) {
    return unsupported("final_logit_softcapping");
  }
  for (const char* key : {"selector_rank", "conv_kernel_size"}) {
    if (Lookup(j, key) != nullptr) return unsupported(absl::StrCat("DFlash2's '", key, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DFlashConfig> DFlashConfigFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("dflash config.json: not a JSON object");
  DQ_RETURN_IF_ERROR(CheckSupported(j));
  DFlashConfig c;
  // The drafter's layers are Qwen3 layers whatever model_type the exporter copied over.
  nlohmann::json layers = j;
  layers["model_type"] = "qwen3";
  layers.erase("architectures");
  auto parsed = ModelConfigFromHfJson(layers);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(),
                        absl::StrCat("dflash config.json: ", parsed.status().message()));
  }
  c.layers = std::move(*parsed);
  const nlohmann::json* ids = Lookup(j, "target_layer_ids");
  if (ids == nullptr || !ids->is_array() || ids->empty()) {
    return absl::InvalidArgumentError(
        "dflash config.json: 'target_layer_ids' (dflash_config.target_layer_ids) must be a "
        "non-empty list of target layer indices");
  }
  for (const auto& id : *ids) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("dflash config.json: target_layer_ids must be integers, got ", ids->dump()));
    }
    c.target_layer_ids.push_back(id.get<int>());
  }
  c.block_size = 16;  // the published default
  if (Lookup(j, "block_size") != nullptr) {
    DQ_ASSIGN_OR_RETURN(const int64_t b, IntKey(j, "block_size"));
    if (b < 2 || b > 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat("dflash config.json: block_size must be in [2, 1024], got ", b));
    }
    c.block_size = static_cast<int>(b);
  }
  DQ_ASSIGN_OR_RETURN(const int64_t mask, IntKey(j, "mask_token_id"));
  c.mask_token_id = static_cast<int32_t>(mask);
  if (Lookup(j, "num_target_layers") != nullptr) {
    DQ_ASSIGN_OR_RETURN(const int64_t n, IntKey(j, "num_target_layers"));
    c.num_target_layers = static_cast<int>(n);
  }
  return c;
}

absl::StatusOr<DFlashConfig> ReadDFlashConfig(const std::string& dir) {
  const std::filesystem::path p = std::filesystem::path(dir) / "config.json";
  std::ifstream f(p);
  if (!f) {
    return absl::NotFoundError(absl::StrCat(
        "cannot read ", p.string(), "; --draft-weights must be a DFlash checkpoint directory"));
  }
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(p.string() + " is not valid JSON");
  auto c = DFlashConfigFromJson(j);
  if (!c.ok()) {
    return absl::Status(c.status().code(), absl::StrCat(dir, ": ", c.status().message()));
  }
  return c;
}

absl::Status CheckDFlashTarget(const DFlashConfig& c, const ModelConfig& target) {
  auto mismatch = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the dflash drafter does not fit the target: ", what,
        "; use the drafter made for this model (a DFlash drafter reads the target's own hidden "
        "states, embeddings and lm_head)"));
  };
  if (c.layers.hidden_size != target.hidden_size) {
    return mismatch(absl::StrCat("its hidden size is ", c.layers.hidden_size, ", the target's ",
                                 target.hidden_size));
  }
  if (c.layers.vocab_size != target.vocab_size) {
    return mismatch(absl::StrCat("its vocabulary has ", c.layers.vocab_size,
                                 " tokens, the target's ", target.vocab_size));
  }
  if (c.mask_token_id < 0 || c.mask_token_id >= target.vocab_size) {
    return mismatch(absl::StrCat("its mask token id ", c.mask_token_id,
                                 " is outside the target's vocabulary [0, ", target.vocab_size,
                                 ")"));
  }
  if (c.num_target_layers != 0 && c.num_target_layers != target.num_layers) {
    return mismatch(absl::StrCat("it was made for a target of ", c.num_target_layers,
                                 " layers, this target has ", target.num_layers));
  }
  for (int id : c.target_layer_ids) {
    if (id < 0 || id >= target.num_layers) {
      return mismatch(absl::StrCat("target_layer_ids [", absl::StrJoin(c.target_layer_ids, ", "),
                                   "] name layer ", id, ", but the target's layers are 0..",
                                   target.num_layers - 1));
    }
  }
  return absl::OkStatus();
}

}  // namespace dq
