#include "engine/spec/dflash_checkpoint_maker.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/dtype.h"
#include "engine/checkpoint/safetensors_checkpoint.h"

namespace dq {
namespace {

std::vector<int> DefaultLayerIds(int n) {
  if (n <= 1) return {0};
  if (n == 2) return {0, 1};
  return {0, n / 2, n - 1};
}

class RandomTensors {
 public:
  RandomTensors(uint64_t seed, bool f32) : rng_(seed), f32_(f32) {}
  void Add(const std::string& name, std::vector<int64_t> shape, float mean, float stddev) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    auto& buf = buffers_.emplace_back(n * (f32_ ? 4 : 2));
    std::normal_distribution<float> dist(mean, stddev);
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng_);
      if (f32_) {
        std::memcpy(&buf[i * 4], &v, 4);
      } else {
        const uint16_t b = F32ToBF16(v);
        std::memcpy(&buf[i * 2], &b, 2);
      }
    }
    entries_.push_back({name, f32_ ? DType::kF32 : DType::kBF16, std::move(shape), buf.data()});
  }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }

 private:
  std::mt19937_64 rng_;
  bool f32_;
  std::deque<std::vector<uint8_t>> buffers_;
  std::vector<SafetensorsEntry> entries_;
};

}  // namespace

absl::Status WriteRandomDFlashCheckpoint(const ModelConfig& t, const RandomDFlashOptions& o,
                                         const std::string& dir) {
  const int heads = o.heads > 0 ? o.heads : t.num_heads;
  const int kv_heads = o.kv_heads > 0 ? o.kv_heads : t.num_kv_heads;
  const int head_dim = o.head_dim > 0 ? o.head_dim : t.head_dim;
  const int inter = o.intermediate > 0 ? o.intermediate : t.intermediate_size;
  const std::vector<int> ids =
      o.target_layer_ids.empty() ? DefaultLayerIds(t.num_layers) : o.target_layer_ids;
  const int32_t mask = o.mask_token_id >= 0 ? o.mask_token_id : t.vocab_size - 1;
  if (o.layers < 1 || o.block_size < 2 || heads % kv_heads != 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        "random dflash checkpoint: need layers >= 1, block size >= 2, heads a multiple of KV "
        "heads and an even head dim");
  }
  const int64_t h = t.hidden_size;
  const nlohmann::json config = {
      {"architectures", {"DFlashDraftModel"}},
      {"model_type", "qwen3"},
      {"block_size", o.block_size},
      {"num_target_layers", t.num_layers},
      {"dflash_config", {{"mask_token_id", mask}, {"target_layer_ids", ids}}},
      {"vocab_size", t.vocab_size},
      {"hidden_size", h},
      {"intermediate_size", inter},
      {"num_hidden_layers", o.layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0},
      {"max_position_embeddings", t.max_context},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"layer_types", std::vector<std::string>(o.layers, "full_attention")},
      {"torch_dtype", o.f32 ? "float32" : "bfloat16"}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream f(std::filesystem::path(dir) / "config.json");
  if (ec || !f) return absl::InternalError("cannot write " + dir + "/config.json");
  f << config.dump(2) << "\n";
  RandomTensors m(o.seed, o.f32);
  const float in_std = 1.0f / std::sqrt(static_cast<float>(h));
  m.Add("fc.weight", {h, static_cast<int64_t>(ids.size()) * h}, 0.0f,
        1.0f / std::sqrt(static_cast<float>(ids.size() * h)));
  m.Add("hidden_norm.weight", {h}, 1.0f, 0.1f);
  m.Add("norm.weight", {h}, 1.0f, 0.1f);
  for (int i = 0; i < o.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    m.Add(p + "input_layernorm.weight", {h}, 1.0f, 0.1f);
    m.Add(p + "post_attention_layernorm.weight", {h}, 1.0f, 0.1f);
    m.Add(p + "self_attn.q_proj.weight", {heads * head_dim, h}, 0.0f, in_std);
    m.Add(p + "self_attn.k_proj.weight", {kv_heads * head_dim, h}, 0.0f, in_std);
    m.Add(p + "self_attn.v_proj.weight", {kv_heads * head_dim, h}, 0.0f, in_std);
    m.Add(p + "self_attn.o_proj.weight", {h, heads * head_dim}, 0.0f,
          1.0f / std::sqrt(static_cast<float>(heads * head_dim)));
    m.Add(p + "self_attn.q_norm.weight", {head_dim}, 1.0f, 0.1f);
    m.Add(p + "self_attn.k_norm.weight", {head_dim}, 1.0f, 0.1f);
    m.Add(p + "mlp.gate_proj.weight", {inter, h}, 0.0f, in_std);
    m.Add(p + "mlp.up_proj.weight", {inter, h}, 0.0f, in_std);
    m.Add(p + "mlp.down_proj.weight", {h, inter}, 0.0f,
          1.0f / std::sqrt(static_cast<float>(inter)));
  }
  return WriteSafetensors((std::filesystem::path(dir) / "model.safetensors").string(), m.entries(),
                          {{"format", "pt"}});
}

}  // namespace dq
