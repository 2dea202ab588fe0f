// Tensor names of the Llama-family layout in the two checkpoint conventions we read.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace dq {

// `role` is the GGUF short name ("attn_q", "ffn_down", ...); HF's is derived from it.
class TensorNames {
 public:
  // `hf_layers`: what HF layer names start with ("model.layers."; a DFlash drafter's are bare
  // "layers.").
  // `sandwich_norms`: HF's Gemma layout, where "post_attention_layernorm" is the attention
  // block's output norm and the MLP's input norm is "pre_feedforward_layernorm" (in Llama's,
  // "post_attention_layernorm" is the MLP's input norm).
  // `gguf_ffn_norm_post_attention`: llama.cpp's qwen35 layout, where the MLP's input norm is
  // "post_attention_norm".
  explicit TensorNames(bool gguf, std::string hf_layers = "model.layers.",
                       bool sandwich_norms = false, bool gguf_ffn_norm_post_attention = false)
      : gguf_(gguf),
        sandwich_norms_(sandwich_norms),
        gguf_ffn_norm_post_attention_(gguf_ffn_norm_post_attention),
        hf_layers_(std::move(hf_layers)) {}
  bool gguf() const { return gguf_; }
  std::string Embedding() const {
    return gguf_ ? "token_embd.weight" : "model.embed_tokens.weight";
  }
  std::string FinalNorm() const { return gguf_ ? "output_norm.weight" : "model.norm.weight"; }
  std::string LmHead() const { return gguf_ ? "output.weight" : "lm_head.weight"; }
  std::string Layer(int layer, const std::string& role) const;
  // A bare parameter's name (no ".weight" in HF's convention: a GDN's dt_bias, A_log).
  std::string LayerBare(int layer, const std::string& role) const;

 private:
  bool gguf_;
  bool sandwich_norms_;
  bool gguf_ffn_norm_post_attention_;
  std::string hf_layers_;
};

inline std::string TensorNames::Layer(int layer, const std::string& role) const {
  if (gguf_) {
    if (gguf_ffn_norm_post_attention_ && role == "ffn_norm") {
      return absl::StrCat("blk.", layer, ".post_attention_norm.weight");
    }
    return absl::StrCat("blk.", layer, ".", role, ".weight");
  }
  static const std::pair<const char*, const char*> kSandwich[] = {
      {"ffn_norm", "pre_feedforward_layernorm"},
      {"post_attention_norm", "post_attention_layernorm"},
      {"post_ffw_norm", "post_feedforward_layernorm"},
  };
  for (const auto& [g, hf] : kSandwich) {
    if (sandwich_norms_ && role == g) return absl::StrCat(hf_layers_, layer, ".", hf, ".weight");
  }
  static const std::pair<const char*, const char*> kHf[] = {
      {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      // Qwen3.5's Gated DeltaNet (roles as llama.cpp's qwen35 GGUF names them).
      {"attn_qkv", "linear_attn.in_proj_qkv"},
      {"attn_gate", "linear_attn.in_proj_z"},
      {"ssm_beta", "linear_attn.in_proj_b"},
      {"ssm_alpha", "linear_attn.in_proj_a"},
      {"ssm_out", "linear_attn.out_proj"},
      {"ssm_conv1d", "linear_attn.conv1d"},
      {"ssm_norm", "linear_attn.norm"},
  };
  for (const auto& [g, hf] : kHf) {
    if (role == g) return absl::StrCat(hf_layers_, layer, ".", hf, ".weight");
  }
  return absl::StrCat(hf_layers_, layer, ".", role, ".weight");
}

inline std::string TensorNames::LayerBare(int layer, const std::string& role) const {
  if (gguf_) {  // llama.cpp's names of a GDN's dt_bias (a bias) and A_log (no suffix)
    if (role == "ssm_dt") return absl::StrCat("blk.", layer, ".ssm_dt.bias");
    if (role == "ssm_a") return absl::StrCat("blk.", layer, ".ssm_a");
    return absl::StrCat("blk.", layer, ".", role, ".weight");
  }
  static const std::pair<const char*, const char*> kHf[] = {
      {"ssm_dt", "linear_attn.dt_bias"},
      {"ssm_a", "linear_attn.A_log"},
  };
  for (const auto& [g, hf] : kHf) {
    if (role == g) return absl::StrCat(hf_layers_, layer, ".", hf);
  }
  return absl::StrCat(hf_layers_, layer, ".", role);
}

}  // namespace dq
