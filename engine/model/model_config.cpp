#include "engine/model/model_config.h"

#include "engine/checkpoint/gguf_file.h"
#include "engine/model/architecture.h"

namespace dq {
namespace {

// HF names the class ("LlamaForCausalLM") or the type ("llama"); we name the graph.
absl::StatusOr<const Architecture*> ArchFromHf(const nlohmann::json& config) {
  std::string type = config.value("model_type", "");
  if (type.empty() && config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty()) {
    type = config["architectures"][0].get<std::string>();
  }
  return RequireArchitecture(type.empty() ? "(none given)" : type);
}

std::vector<int32_t> IdList(const nlohmann::json& v) {
  std::vector<int32_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  if (v.is_array()) {
    for (const auto& x : v) {
      if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
    }
  }
  return ids;
}

}  // namespace

bool ModelConfig::llama_layer() const {
  return rope_local_theta == 0.0f && rope_linear_factor == 1.0f && attention_scale == 0.0f &&
         sliding_window == 0 && sliding_layers.empty() && !gelu_mlp && !attn_output_gate &&
         rotary_dim == 0 && linear_layers.empty();
}

absl::Status ModelConfig::Validate() const {
  auto positive = [](int v, const char* name) -> absl::Status {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model config: ", name, " must be positive, got ", v));
    }
    return absl::OkStatus();
  };
  DQ_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  DQ_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  DQ_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  DQ_RETURN_IF_ERROR(positive(num_layers, "num_hidden_layers"));
  DQ_RETURN_IF_ERROR(positive(num_heads, "num_attention_heads"));
  DQ_RETURN_IF_ERROR(positive(num_kv_heads, "num_key_value_heads"));
  DQ_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  DQ_RETURN_IF_ERROR(positive(max_context, "max_position_embeddings"));
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: num_attention_heads (", num_heads,
                                                   ") must be a multiple of num_key_value_heads (",
                                                   num_kv_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: head_dim must be even for RoPE, got ", head_dim));
  }
  if (rotary_dim < 0 || rotary_dim > head_dim || rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config: the rotary dims (head_dim x partial_rotary_factor) must be even and at "
        "most head_dim (",
        head_dim, "), got ", rotary_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& j) {
  ModelConfig c;
  DQ_ASSIGN_OR_RETURN(const Architecture* arch, ArchFromHf(j));
  c.architecture = std::string(arch->name);
  try {
    c.vocab_size = j.at("vocab_size").get<int>();
    c.hidden_size = j.at("hidden_size").get<int>();
    c.intermediate_size = j.at("intermediate_size").get<int>();
    c.num_layers = j.at("num_hidden_layers").get<int>();
    c.num_heads = j.at("num_attention_heads").get<int>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null()
                     ? j["head_dim"].get<int>()
                     : c.hidden_size / std::max(1, c.num_heads);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
    c.rope_theta = j.value("rope_theta", 10000.0f);
    c.max_context = j.value("max_position_embeddings", 2048);
    c.tie_word_embeddings = j.value("tie_word_embeddings", false);
    if (j.contains("bos_token_id"))
      c.bos_token_id = IdList(j["bos_token_id"]).empty() ? -1 : IdList(j["bos_token_id"])[0];
    if (j.contains("eos_token_id")) c.eos_token_ids = IdList(j["eos_token_id"]);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: missing or mistyped field: ", e.what()));
  }
  if (arch->configure_hf != nullptr) {
    DQ_RETURN_IF_ERROR(arch->configure_hf(j, c));
  } else {
    DQ_RETURN_IF_ERROR(ReadRope(j, c));
  }
  c.rope_style = j.value("dq_rope_interleaved", false) ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  if (arch->configure) arch->configure(c, /*gguf=*/false);
  DQ_ASSIGN_OR_RETURN(c.quant, QuantConfig::FromHfConfig(j));
  DQ_RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::Status ReadRope(const nlohmann::json& j, ModelConfig& c) {
  // transformers >= 5 writes the RoPE base (and any scaling) only in "rope_parameters".
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) {
      c.rope_theta = rp["rope_theta"].get<float>();
    }
    const std::string type = rp.value("rope_type", std::string("default"));
    if (type != "default") {
      return absl::UnimplementedError("config.json: rope_parameters.rope_type '" + type +
                                      "' is not supported yet; only 'default'");
    }
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    return absl::UnimplementedError(
        "config.json: rope_scaling is not supported yet; remove it or use a model without it");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& g) {
  ModelConfig c;
  DQ_ASSIGN_OR_RETURN(const std::string name, g.GetString("general.architecture"));
  DQ_ASSIGN_OR_RETURN(const Architecture* arch, RequireArchitecture(name));
  if (!arch->reads_gguf) {
    return absl::UnimplementedError(
        absl::StrCat("GGUF files of ", name, " are not read yet; use its HF checkpoint"));
  }
  c.architecture = std::string(arch->name);
  const std::string& a = name;  // the metadata keys' prefix
  auto get_int = [&](const std::string& key) { return g.GetInt(a + "." + key); };
  DQ_ASSIGN_OR_RETURN(int64_t hidden, get_int("embedding_length"));
  DQ_ASSIGN_OR_RETURN(int64_t ffn, get_int("feed_forward_length"));
  DQ_ASSIGN_OR_RETURN(int64_t layers, get_int("block_count"));
  DQ_ASSIGN_OR_RETURN(int64_t heads, get_int("attention.head_count"));
  DQ_ASSIGN_OR_RETURN(int64_t ctx, get_int("context_length"));
  DQ_ASSIGN_OR_RETURN(double eps, g.GetFloat(a + ".attention.layer_norm_rms_epsilon"));
  c.hidden_size = static_cast<int>(hidden);
  c.intermediate_size = static_cast<int>(ffn);
  c.num_layers = static_cast<int>(layers);
  c.num_heads = static_cast<int>(heads);
  c.max_context = static_cast<int>(ctx);
  c.rms_norm_eps = static_cast<float>(eps);
  auto kv = get_int("attention.head_count_kv");
  c.num_kv_heads = kv.ok() ? static_cast<int>(*kv) : c.num_heads;
  auto key_len = get_int("attention.key_length");
  c.head_dim = key_len.ok() ? static_cast<int>(*key_len) : c.hidden_size / c.num_heads;
  auto theta = g.GetFloat(a + ".rope.freq_base");
  c.rope_theta = theta.ok() ? static_cast<float>(*theta) : 10000.0f;
  auto tokens = g.GetStringArray("tokenizer.ggml.tokens");
  auto vocab = get_int("vocab_size");
  c.vocab_size = vocab.ok() ? static_cast<int>(*vocab)
                            : (tokens.ok() ? static_cast<int>((*tokens)->size()) : 0);
  c.tie_word_embeddings = g.Find("output.weight") == nullptr;
  c.rope_style = RopeStyle::kNeox;
  if (arch->configure) arch->configure(c, /*gguf=*/true);
  if (arch->configure_gguf) DQ_RETURN_IF_ERROR(arch->configure_gguf(g, c));
  auto bos = g.GetInt("tokenizer.ggml.bos_token_id");
  if (bos.ok()) c.bos_token_id = static_cast<int32_t>(*bos);
  auto eos = g.GetInt("tokenizer.ggml.eos_token_id");
  if (eos.ok()) c.eos_token_ids.push_back(static_cast<int32_t>(*eos));
  DQ_RETURN_IF_ERROR(c.Validate());
  return c;
}

}  // namespace dq
