// Hyper-parameters of a decoder-only model, read from HF config.json or GGUF metadata.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/quant/quant_config.h"

namespace dq {

class GgufFile;

// How RoPE pairs the dimensions of a head. HF checkpoints rotate (i, i + d/2) ("neox");
// llama.cpp's converter permutes Llama's q/k weights so that adjacent pairs (2i, 2i+1) rotate.
enum class RopeStyle { kNeox, kInterleaved };

struct ModelConfig {
  std::string architecture;  // an Architecture::name (architecture.h)
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  int max_context = 0;
  bool tie_word_embeddings = false;
  RopeStyle rope_style = RopeStyle::kNeox;
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  // Gemma 3 (set by its architecture file; the defaults are the Llama layer's):
  float rope_local_theta = 0.0f;     // RoPE base of the sliding-window layers; 0: rope_theta
  float rope_linear_factor = 1.0f;   // "linear" RoPE scaling of the other layers: pos / factor
  float attention_scale = 0.0f;      // scores' scale; 0: 1/sqrt(head_dim)
  int sliding_window = 0;            // positions a sliding-window layer sees, itself included
  std::vector<bool> sliding_layers;  // per layer: sliding-window (true) or global; empty: none
  bool gelu_mlp = false;             // GeGLU (tanh GELU) instead of SwiGLU
  // Qwen3.5 (set by its architecture file):
  bool attn_output_gate = false;    // q_proj doubled: per head [q | gate], out *= sigmoid(gate)
  int rotary_dim = 0;               // leading dims of a head that RoPE rotates; 0: head_dim
  std::vector<bool> linear_layers;  // per layer: Gated DeltaNet (true) or attention; empty: none
  int gdn_key_heads = 0;            // linear_num_key_heads (q and k)
  int gdn_value_heads = 0;          // linear_num_value_heads
  int gdn_key_dim = 0;              // linear_key_head_dim
  int gdn_value_dim = 0;            // linear_value_head_dim
  int gdn_conv_kernel = 0;          // linear_conv_kernel_dim
  // How the checkpoint orders the value heads: HF groups them by key head (value head h reads
  // key head h / (value_heads / key_heads)); llama.cpp's qwen35 GGUF tiles them (h % key_heads).
  bool gdn_tiled_value_heads = false;
  QuantConfig quant;  // how the checkpoint's linear weights are stored

  int q_dim() const { return num_heads * head_dim; }
  // No Gemma 3 or Qwen3.5 facts: what the exporters and the quantizer write (they know only this
  // layer).
  bool llama_layer() const;
  int kv_dim() const { return num_kv_heads * head_dim; }
  // The q projection's rows: q_dim, twice that with the output gate.
  int q_proj_dim() const { return attn_output_gate ? 2 * q_dim() : q_dim(); }
  int rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool is_linear_layer(int layer) const {
    return layer < static_cast<int>(linear_layers.size()) && linear_layers[layer];
  }
  // Whether sequences carry recurrent state (some layer is a Gated DeltaNet).
  bool has_recurrent_state() const {
    for (bool l : linear_layers) {
      if (l) return true;
    }
    return false;
  }
  int gdn_qk_dim() const { return gdn_key_heads * gdn_key_dim; }       // q's (and k's) width
  int gdn_v_dim() const { return gdn_value_heads * gdn_value_dim; }    // v's and z's width
  int gdn_conv_dim() const { return 2 * gdn_qk_dim() + gdn_v_dim(); }  // conv channels: q|k|v
  // Checks internal consistency (heads divide, positive sizes); the error names the field.
  absl::Status Validate() const;
};

// Parses a HF config.json object. Unknown architectures are an error that lists the supported.
absl::StatusOr<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& config);
// The Llama family's RoPE fields of config.json (rope_theta, or transformers 5's
// rope_parameters with rope_type "default"); scaling is Unimplemented.
absl::Status ReadRope(const nlohmann::json& config, ModelConfig& c);
// Reads `<arch>.*` GGUF metadata.
absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& gguf);

}  // namespace dq
