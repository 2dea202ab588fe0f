#include "engine/model/qwen3_5.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint/gguf_file.h"
#include "engine/model/hf_from_gguf.h"

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

// llama.cpp's qwen35 GGUF metadata (its converter's and loader's keys): the GDN's shape in
// ssm.* (group_count: key heads, time_step_rank: value heads, state_size: a key head's dim,
// inner_size: all value dims), every full_attention_interval-th layer attention (4 when absent,
// as its loader), the rotated dims in rope.dimension_count. Text positions make the stored
// mRoPE sections plain RoPE, so they are not read. Value heads are stored tiled.
absl::Status ConfigureGguf(const GgufFile& g, ModelConfig& c) {
  auto get = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    return g.GetInt("qwen35." + key);
  };
  DQ_ASSIGN_OR_RETURN(int64_t kernel, get("ssm.conv_kernel"));
  DQ_ASSIGN_OR_RETURN(int64_t key_dim, get("ssm.state_size"));
  DQ_ASSIGN_OR_RETURN(int64_t key_heads, get("ssm.group_count"));
  DQ_ASSIGN_OR_RETURN(int64_t value_heads, get("ssm.time_step_rank"));
  DQ_ASSIGN_OR_RETURN(int64_t inner, get("ssm.inner_size"));
  if (kernel <= 0 || key_dim <= 0 || key_heads <= 0 || value_heads <= 0 || inner <= 0 ||
      inner % value_heads || value_heads % key_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF: qwen35.ssm.* must be positive, inner_size (", inner,
                     ") a multiple of "
                     "time_step_rank (",
                     value_heads, ") and that a multiple of group_count (", key_heads, ")"));
  }
  c.gdn_conv_kernel = static_cast<int>(kernel);
  c.gdn_key_dim = static_cast<int>(key_dim);
  c.gdn_key_heads = static_cast<int>(key_heads);
  c.gdn_value_heads = static_cast<int>(value_heads);
  c.gdn_value_dim = static_cast<int>(inner / value_heads);
  c.gdn_tiled_value_heads = true;
  auto interval = get("full_attention_interval");
  const int64_t every = interval.ok() ? *interval : 4;
  if (every <= 0) return absl::InvalidArgumentError("GGUF: qwen35.full_attention_interval <= 0");
  c.linear_layers.assign(c.num_layers, false);
  for (int i = 0; i < c.num_layers; ++i) c.linear_layers[i] = (i + 1) % every != 0;
  auto rot = get("rope.dimension_count");
  c.rotary_dim = rot.ok() ? static_cast<int>(*rot) : c.head_dim;
  if (auto type = g.GetString("qwen35.rope.scaling.type"); type.ok() && *type != "none") {
    return absl::UnimplementedError("GGUF: Qwen3.5 rope.scaling.type '" + *type +
                                    "' is not supported");
  }
  c.attn_output_gate = true;
  return absl::OkStatus();
}

// HF's Qwen3_5RMSNorm multiplies by (1 + w); a bound norm multiplies by its values (llama.cpp's
// converter stores 1 + w: nothing to add for GGUF).
void AddOne(std::vector<float>& norm) {
  for (float& w : norm) w += 1.0f;
}

// llama.cpp's converter stores -exp(A_log) as ssm_a; the program keeps A_log.
absl::Status ALogFromGguf(std::vector<float>& a, const std::string& name) {
  for (float& v : a) {
    if (!(v < 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF: ", name, " holds ", v, "; llama.cpp stores -exp(A_log) < 0"));
    }
    v = std::log(-v);
  }
  return absl::OkStatus();
}

absl::StatusOr<ProgramLayer> BindLayer(const WeightBinder& binder, const TensorNames& names,
                                       const ModelConfig& c, int i) {
  const bool hf = !names.gguf();
  DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, c, i));
  if (hf) AddOne(m.norm);
  ProgramLayer l;
  if (c.is_linear_layer(i)) {
    DQ_ASSIGN_OR_RETURN(GatedDeltaBlock g, BindGatedDeltaBlock(binder, names, c, i));
    if (hf) AddOne(g.norm);  // the input norm; the gated norm multiplies by w
    if (!hf) DQ_RETURN_IF_ERROR(ALogFromGguf(g.a_log, names.LayerBare(i, "ssm_a")));
    l.blocks.emplace_back(std::move(g));
  } else {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, c, i, true));
    if (hf) {
      for (auto* v : {&a.norm, &a.q_norm, &a.k_norm}) AddOne(*v);
    }
    a.output_gate = true;
    a.rotary_dim = c.rope_dim() < c.head_dim ? c.rope_dim() : 0;
    l.blocks.emplace_back(std::move(a));
  }
  l.blocks.emplace_back(std::move(m));
  return l;
}

absl::StatusOr<ModelProgram> Bind(const WeightBinder& binder, const TensorNames& names,
                                  const ModelConfig& c) {
  ModelProgram p;
  DQ_RETURN_IF_ERROR(BindEmbeddingsAndHead(binder, names, c, &p));
  if (!names.gguf()) AddOne(p.final_norm);
  for (int i = 0; i < c.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(ProgramLayer l, BindLayer(binder, names, c, i));
    p.layers.push_back(std::move(l));
  }
  return p;
}

// config.json fields that ConfigureHf reads back (value heads in HF's grouped order).
void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) {
  j["model_type"] = "qwen3_5_text";
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < c.num_layers; ++i) {
    types.push_back(c.is_linear_layer(i) ? "linear_attention" : "full_attention");
  }
  j["layer_types"] = types;
  j["linear_num_key_heads"] = c.gdn_key_heads;
  j["linear_num_value_heads"] = c.gdn_value_heads;
  j["linear_key_head_dim"] = c.gdn_key_dim;
  j["linear_value_head_dim"] = c.gdn_value_dim;
  j["linear_conv_kernel_dim"] = c.gdn_conv_kernel;
  j["rope_parameters"] = {
      {"rope_type", "default"},
      {"rope_theta", c.rope_theta},
      {"partial_rotary_factor", static_cast<double>(c.rope_dim()) / c.head_dim}};
}

// Tiled value heads (llama.cpp: head j = v * key_heads + g) back to HF's grouped order
// (g * per_key + v): `unit` rows per head, from row `first_row` of `w` (rows of `cols`).
void UntileRows(const ModelConfig& c, std::vector<float>& w, int64_t first_row, int unit,
                int64_t cols) {
  const int nk = c.gdn_key_heads, r = c.gdn_value_heads / nk;
  std::vector<float> out(w);
  for (int v = 0; v < r; ++v) {
    for (int g = 0; g < nk; ++g) {
      const int64_t from = first_row + int64_t{v * nk + g} * unit;
      const int64_t to = first_row + int64_t{g * r + v} * unit;
      std::copy_n(w.begin() + from * cols, unit * cols, out.begin() + to * cols);
    }
  }
  w = std::move(out);
}

absl::Status VectorToHf(const ModelConfig& c, std::string_view role, std::vector<float>& v,
                        std::vector<int64_t>& shape) {
  const bool norm = role.size() >= 4 && role.substr(role.size() - 4) == "norm";
  if (norm && role != "ssm_norm") {  // stored 1 + w; the GDN's gated norm is w in both
    for (float& w : v) w -= 1.0f;
  } else if (role == "ssm_a" || role == "ssm_dt") {
    if (role == "ssm_a") DQ_RETURN_IF_ERROR(ALogFromGguf(v, "ssm_a"));
    UntileRows(c, v, 0, 1, 1);
  } else if (role == "ssm_conv1d") {
    UntileRows(c, v, 2 * c.gdn_qk_dim(), c.gdn_value_dim, c.gdn_conv_kernel);
    shape = {c.gdn_conv_dim(), 1, c.gdn_conv_kernel};
  }
  return absl::OkStatus();
}

void LinearToHf(const ModelConfig& c, std::string_view role, std::vector<float>& w, int64_t out,
                int64_t in) {
  if (role == "attn_qkv") UntileRows(c, w, 2 * c.gdn_qk_dim(), c.gdn_value_dim, in);
  if (role == "attn_gate") UntileRows(c, w, 0, c.gdn_value_dim, in);
  if (role == "ssm_beta" || role == "ssm_alpha") UntileRows(c, w, 0, 1, in);
  if (role == "ssm_out") {  // columns: each row's value heads
    std::vector<float> row;
    for (int64_t o = 0; o < out; ++o) {
      row.assign(w.begin() + o * in, w.begin() + (o + 1) * in);
      UntileRows(c, row, 0, c.gdn_value_dim, 1);
      std::copy(row.begin(), row.end(), w.begin() + o * in);
    }
  }
}

}  // namespace

const HfFromGguf& Qwen3_5HfFromGguf() {
  static const HfFromGguf kConvert{
      .config = &WriteHfConfig, .vector = &VectorToHf, .linear = &LinearToHf};
  return kConvert;
}

const Architecture& Qwen3_5Architecture() {
  static const Architecture kQwen3_5{.name = "qwen3_5",
                                     .hf_names = {"qwen3_5_text", "Qwen3_5ForCausalLM"},
                                     .hf_class = "Qwen3_5ForCausalLM",
                                     .configure = nullptr,
                                     .bind = &Bind,
                                     .configure_hf = &ConfigureHf,
                                     .hf_sandwich_norms = false,
                                     .reads_gguf = true,
                                     .configure_gguf = &ConfigureGguf,
                                     .gguf_name = "qwen35",
                                     .gguf_ffn_norm_post_attention = true};
  return kQwen3_5;
}

}  // namespace dq
