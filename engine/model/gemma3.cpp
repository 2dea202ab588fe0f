#include "engine/model/gemma3.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint/gguf_file.h"
#include "engine/model/hf_from_gguf.h"

namespace dq {
namespace {

// One RoPE entry of transformers 5's per-layer-type rope_parameters (or 4.x's flat fields):
// its base, and the factor of "linear" scaling (positions / factor).
absl::Status ReadRopeEntry(const nlohmann::json& rp, float* theta, float* factor) {
  if (!rp.is_object()) return absl::OkStatus();
  if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) {
    *theta = rp["rope_theta"].get<float>();
  }
  const std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
  if (type == "linear") {
    *factor = rp.value("factor", 1.0f);
  } else if (type != "default") {
    return absl::UnimplementedError("config.json: Gemma 3 rope_type '" + type +
                                    "' is not supported; only 'default' and 'linear'");
  }
  return absl::OkStatus();
}

absl::Status ReadLayerTypes(const nlohmann::json& j, ModelConfig& c) {
  c.sliding_layers.assign(c.num_layers, false);
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    const auto& types = j["layer_types"];
    if (static_cast<int>(types.size()) != c.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: layer_types has ", types.size(),
                                                     " entries for ", c.num_layers, " layers"));
    }
    for (int i = 0; i < c.num_layers; ++i) {
      c.sliding_layers[i] = types[i].get<std::string>() == "sliding_attention";
    }
    return absl::OkStatus();
  }
  // transformers 4.x: every `pattern`-th layer is global.
  const int pattern = j.value("sliding_window_pattern", j.value("_sliding_window_pattern", 6));
  for (int i = 0; i < c.num_layers; ++i) c.sliding_layers[i] = pattern <= 0 || (i + 1) % pattern;
  return absl::OkStatus();
}

absl::Status ConfigureHf(const nlohmann::json& j, ModelConfig& c) {
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"}) {
    if (j.contains(cap) && !j[cap].is_null()) {
      return absl::UnimplementedError(
          absl::StrCat("config.json: Gemma 3 with ", cap, " is not supported (Gemma 3 has none)"));
    }
  }
  const std::string act = j.value("hidden_activation", j.value("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") {
    return absl::UnimplementedError("config.json: Gemma 3 activation '" + act +
                                    "' is not supported; only gelu_pytorch_tanh");
  }
  c.gelu_mlp = true;
  c.sliding_window = j.value("sliding_window", 4096);
  DQ_RETURN_IF_ERROR(ReadLayerTypes(j, c));
  c.rope_theta = j.value("rope_theta", 1000000.0f);
  c.rope_local_theta = j.value("rope_local_base_freq", 10000.0f);
  if (j.contains("rope_scaling")) {
    DQ_RETURN_IF_ERROR(ReadRopeEntry(j["rope_scaling"], &c.rope_theta, &c.rope_linear_factor));
  }
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    float unused = 1.0f;
    if (rp.contains("full_attention")) {
      DQ_RETURN_IF_ERROR(ReadRopeEntry(rp["full_attention"], &c.rope_theta, &c.rope_linear_factor));
    }
    if (rp.contains("sliding_attention")) {
      DQ_RETURN_IF_ERROR(ReadRopeEntry(rp["sliding_attention"], &c.rope_local_theta, &unused));
      if (unused != 1.0f) {
        return absl::UnimplementedError("config.json: scaled RoPE on Gemma 3's local layers");
      }
    }
  }
  const float scalar = j.value("query_pre_attn_scalar", static_cast<float>(c.head_dim));
  c.attention_scale = 1.0f / std::sqrt(scalar);
  return absl::OkStatus();
}

// llama.cpp's gemma3 GGUF metadata: the window and the global layers' RoPE scaling are stored;
// what its loader fixes for every Gemma 3 is fixed here the same way when the file does not say
// it: every 6th layer global, local RoPE base 10000, scores scaled by 1/sqrt(head_dim) (the 27B,
// 62 layers, by 1/sqrt(hidden / heads): its query_pre_attn_scalar, which GGUF does not store).
absl::Status ConfigureGguf(const GgufFile& g, ModelConfig& c) {
  for (const char* cap : {"gemma3.final_logit_softcapping", "gemma3.attn_logit_softcapping"}) {
    if (g.GetFloat(cap).ok()) {
      return absl::UnimplementedError(
          absl::StrCat("GGUF: Gemma 3 with ", cap, " is not supported"));
    }
  }
  c.gelu_mlp = true;
  DQ_ASSIGN_OR_RETURN(int64_t window, g.GetInt("gemma3.attention.sliding_window"));
  c.sliding_window = static_cast<int>(window);
  auto pattern = g.GetInt("gemma3.attention.sliding_window_pattern");
  const int64_t every = pattern.ok() ? *pattern : 6;
  c.sliding_layers.assign(c.num_layers, false);
  for (int i = 0; i < c.num_layers; ++i) c.sliding_layers[i] = every <= 0 || (i + 1) % every;
  auto local = g.GetFloat("gemma3.rope.freq_base_swa");
  c.rope_local_theta = local.ok() ? static_cast<float>(*local) : 10000.0f;
  if (auto type = g.GetString("gemma3.rope.scaling.type"); type.ok() && *type != "none") {
    if (*type != "linear") {
      return absl::UnimplementedError("GGUF: Gemma 3 rope.scaling.type '" + *type +
                                      "' is not supported; only 'linear'");
    }
    DQ_ASSIGN_OR_RETURN(double factor, g.GetFloat("gemma3.rope.scaling.factor"));
    c.rope_linear_factor = static_cast<float>(factor);
  }
  const float scalar = c.num_layers == 62 ? static_cast<float>(c.hidden_size / c.num_heads)
                                          : static_cast<float>(c.head_dim);
  c.attention_scale = 1.0f / std::sqrt(scalar);
  return absl::OkStatus();
}

// HF's Gemma RMSNorm multiplies by (1 + w); llama.cpp's converter adds the 1 when it writes a
// GGUF file, so a bound norm always multiplies by its values.
void AddOne(std::vector<float>& norm) {
  for (float& w : norm) w += 1.0f;
}

absl::StatusOr<ModelProgram> Bind(const WeightBinder& binder, const TensorNames& names,
                                  const ModelConfig& c) {
  ModelProgram p;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, c, &p));
  p.embedding_scale = std::sqrt(static_cast<float>(c.hidden_size));
  const bool offset = !names.gguf();
  if (offset) AddOne(p.final_norm);
  for (int i = 0; i < c.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, c, i, true, true));
    DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, c, i, true));
    if (offset) {
      for (auto* v : {&a.norm, &a.q_norm, &a.k_norm, &a.post_norm, &m.norm, &m.post_norm}) {
        AddOne(*v);
      }
    }
    const bool sliding = i < static_cast<int>(c.sliding_layers.size()) && c.sliding_layers[i];
    a.window = sliding ? c.sliding_window : 0;
    a.local_rope = sliding;
    m.activation = Activation::kGeluTanh;
    p.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  return p;
}

// config.json fields that ConfigureHf reads back.
void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) {
  j["model_type"] = "gemma3_text";
  j["hidden_act"] = "gelu_pytorch_tanh";
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["sliding_window"] = c.sliding_window;
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < c.num_layers; ++i) {
    const bool sliding = i < static_cast<int>(c.sliding_layers.size()) && c.sliding_layers[i];
    types.push_back(sliding ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
  j["rope_local_base_freq"] = c.rope_local_theta;
  if (c.rope_linear_factor != 1.0f) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_linear_factor}};
  }
  const double scale = c.attention_scale;
  j["query_pre_attn_scalar"] = 1.0 / (scale * scale);
}

// llama.cpp stores every norm as 1 + w; HF's checkpoint holds w.
absl::Status VectorToHf(const ModelConfig&, std::string_view role, std::vector<float>& v,
                        std::vector<int64_t>&) {
  if (role.size() >= 4 && role.substr(role.size() - 4) == "norm") {
    for (float& w : v) w -= 1.0f;
  }
  return absl::OkStatus();
}

}  // namespace

const HfFromGguf& Gemma3HfFromGguf() {
  static const HfFromGguf kConvert{.config = &WriteHfConfig, .vector = &VectorToHf};
  return kConvert;
}

const Architecture& Gemma3Architecture() {
  static const Architecture kGemma3{.name = "gemma3",
                                    .hf_names = {"gemma3_text", "Gemma3ForCausalLM"},
                                    .hf_class = "Gemma3ForCausalLM",
                                    .configure = nullptr,
                                    .bind = &Bind,
                                    .configure_hf = &ConfigureHf,
                                    .hf_sandwich_norms = true,
                                    .reads_gguf = true,
                                    .configure_gguf = &ConfigureGguf};
  return kGemma3;
}

}  // namespace dq
