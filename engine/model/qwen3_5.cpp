#include "engine/model/qwen3_5.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace dq {
namespace {

absl::Status ReadLayerTypes(const nlohmann::json& j, ModelConfig& c) {
  c.linear_layers.assign(c.num_layers, false);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    if (static_cast<int>(types.size()) != c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: layer_types has ", types.size(),
                                                     " entries for ", c.num_layers, " layers"));
    }
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string t = types[i].get<std::string>();
      if (t != "linear_attention" && t != "full_attention") {
        return absl::InvalidArgumentError("config.json: Qwen3.5 layer type '" + t +
                                          "'; expected linear_attention or full_attention");
      }
      c.linear_layers[i] = t == "linear_attention";
    }
    return absl::OkStatus();
  }
  const int interval = j.value("full_attention_interval", 4);
  if (interval <= 0) return absl::InvalidArgumentError("config.json: full_attention_interval <= 0");
  for (int i = 0; i < c.num_layers; ++i) c.linear_layers[i] = (i + 1) % interval != 0;
  return absl::OkStatus();
}

// transformers 5's rope_parameters (or 4.x's flat rope_theta / partial_rotary_factor); only the
// default RoPE type (text positions make Qwen3.5's mRoPE sections plain RoPE).
absl::Status ReadQwen35Rope(const nlohmann::json& j, ModelConfig& c) {
  c.rope_theta = j.value("rope_theta", 10000000.0f);
  float partial = j.value("partial_rotary_factor", 0.25f);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    c.rope_theta = rp.value("rope_theta", c.rope_theta);
    partial = rp.value("partial_rotary_factor", partial);
    const std::string type = rp.value("rope_type", std::string("default"));
    if (type != "default") {
      return absl::UnimplementedError("config.json: Qwen3.5 rope_type '" + type +
                                      "' is not supported; only 'default'");
    }
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return absl::UnimplementedError("config.json: Qwen3.5 with rope_scaling is not supported");
  }
  c.rotary_dim = static_cast<int>(static_cast<float>(c.head_dim) * partial);  // HF's int()
  return absl::OkStatus();
}

absl::Status ConfigureHf(const nlohmann::json& j, ModelConfig& c) {
  const std::string act = j.value("hidden_act", "silu");
  if (act != "silu") {
    return absl::UnimplementedError("config.json: Qwen3.5 hidden_act '" + act +
                                    "' is not supported; only silu");
  }
  if (j.value("attention_bias", false)) {
    return absl::UnimplementedError("config.json: Qwen3.5 with attention_bias is not supported");
  }
  DQ_RETURN_IF_ERROR(ReadLayerTypes(j, c));
  DQ_RETURN_IF_ERROR(ReadQwen35Rope(j, c));
  c.attn_output_gate = true;
  c.gdn_key_heads = j.value("linear_num_key_heads", 16);
  c.gdn_value_heads = j.value("linear_num_value_heads", 32);
  c.gdn_key_dim = j.value("linear_key_head_dim", 128);
  c.gdn_value_dim = j.value("linear_value_head_dim", 128);
  c.gdn_conv_kernel = j.value("linear_conv_kernel_dim", 4);
  if (c.gdn_key_heads <= 0 || c.gdn_value_heads <= 0 || c.gdn_key_dim <= 0 ||
      c.gdn_value_dim <= 0 || c.gdn_conv_kernel <= 0 || c.gdn_value_heads % c.gdn_key_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: Qwen3.5's linear attention needs positive head counts and dims and "
        "linear_num_value_heads (",
        c.gdn_value_heads, ") a multiple of linear_num_key_heads (", c.gdn_key_heads, ")"));
  }
  return absl::OkStatus();
}

// HF's Qwen3_5RMSNorm multiplies by (1 + w); a bound norm multiplies by its values.
void AddOne(std::vector<float>& norm) {
  for (float& w : norm) w += 1.0f;
}

absl::StatusOr<ProgramLayer> BindLayer(const WeightBinder& binder, const TensorNames& names,
                                       const ModelConfig& c, int i) {
  DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, c, i));
  AddOne(m.norm);
  ProgramLayer l;
  if (c.is_linear_layer(i)) {
    DQ_ASSIGN_OR_RETURN(GatedDeltaBlock g, BindGatedDeltaBlock(binder, names, c, i));
    AddOne(g.norm);  // the input norm; the gated norm multiplies by w
    l.blocks.emplace_back(std::move(g));
  } else {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, c, i, true));
    for (auto* v : {&a.norm, &a.q_norm, &a.k_norm}) AddOne(*v);
    a.output_gate = true;
    a.rotary_dim = c.rope_dim() < c.head_dim ? c.rope_dim() : 0;
    l.blocks.emplace_back(std::move(a));
  }
  l.blocks.emplace_back(std::move(m));
  return l;
}

absl::StatusOr<ModelProgram> Bind(const WeightBinder& binder, const TensorNames& names,
                                  const ModelConfig& c) {
  if (names.gguf()) {
    return absl::UnimplementedError(
        "GGUF files of Qwen3.5 are not read yet; use its HF checkpoint");
  }
  ModelProgram p;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, c, &p));
  AddOne(p.final_norm);
  for (int i = 0; i < c.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(ProgramLayer l, BindLayer(binder, names, c, i));
    p.layers.push_back(std::move(l));
  }
  return p;
}

}  // namespace

const Architecture& Qwen3_5Architecture() {
  static const Architecture kQwen3_5{.name = "qwen3_5",
                                     .hf_names = {"qwen3_5_text", "Qwen3_5ForCausalLM"},
                                     .hf_class = "Qwen3_5ForCausalLM",
                                     .configure = nullptr,
                                     .bind = &Bind,
                                     .configure_hf = &ConfigureHf,
                                     .hf_sandwich_norms = false,
                                     .reads_gguf = false};
  return kQwen3_5;
}

}  // namespace dq
