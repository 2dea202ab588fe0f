// The model program: what a decoder is, declared once by its architecture file
// (engine/model/<arch>.cpp) and executed by every backend (the CPU's DecoderModel, engine/cuda's
// CudaDecoderModel, the DFlash drafter's layers). A layer is a list of typed blocks over an fp32
// residual stream; each block reads the stream, normalizes it, and adds its output back. Each
// block also declares the per-sequence state it owns (attention: K/V of every token, in the
// paged pool), so the KV cache's shape follows from the program instead of from the config.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"
#include "engine/model/linear_weight.h"
#include "engine/model/model_config.h"

namespace dq {

// Which linear layers read an activation: q/k/v share theirs, as do gate/up (calibration and
// NVFP4's shared global scales are per input).
enum class LinearInput { kQkv, kO, kGateUp, kDown };

// Pre-norm GQA self-attention with RoPE: x += o(attn(rope(norm?(q(n))), rope(norm?(k(n))), v(n)))
// where n = RMSNorm(x; norm). Owns one layer of the paged K/V pool (`kv_layer`), written for
// every token the block sees.
struct AttentionBlock {
  std::vector<float> norm;    // [hidden]
  LinearWeight q, k, v, o;    // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  std::vector<float> q_norm;  // [head_dim], RMSNorm over each head of q before RoPE; empty: none
  std::vector<float> k_norm;  // [head_dim], the same over k
  // [hidden], RMSNorm of the block's output before it joins the stream (Gemma's sandwich
  // norm: x += post_norm(o(...))); empty: none.
  std::vector<float> post_norm;
  int window = 0;           // > 0: sliding-window attention over the latest `window` positions
  bool local_rope = false;  // RoPE with ModelConfig::rope_local_theta (Gemma's local layers)
  int kv_layer = 0;         // set by ModelProgram::Finalize: its layer of the sequence's KV

  bool has_qk_norm() const { return !q_norm.empty(); }
  // Anything beyond the Llama/Qwen3 block, which only the CPU backend runs so far.
  bool extended() const { return !post_norm.empty() || window > 0 || local_rope; }
};

enum class Activation { kSilu, kGeluTanh };

// Pre-norm gated MLP: x += down(act(gate(n)) * up(n)), n = RMSNorm(x; norm); act is SiLU
// (SwiGLU) or tanh-GELU (GeGLU).
struct MlpBlock {
  std::vector<float> norm;       // [hidden]
  LinearWeight gate, up, down;   // [inter, hidden] x2, [hidden, inter]
  std::vector<float> post_norm;  // [hidden], as AttentionBlock::post_norm; empty: none
  Activation activation = Activation::kSilu;

  bool extended() const { return !post_norm.empty() || activation != Activation::kSilu; }
};

using Block = std::variant<AttentionBlock, MlpBlock>;

// A block's tensors as checkpoints name them (TensorNames::Layer roles, GGUF's short names),
// declared once here: binding (architecture.cpp), the quantizer and every walk over a block's
// weights read these tables, so a new block type is one table, not a list in each of them.
template <typename B>
struct LinearSlot {
  const char* role;
  LinearInput input;
  LinearWeight B::*weight;
  int64_t (*out_features)(const ModelConfig&);
  int64_t (*in_features)(const ModelConfig&);
};
template <typename B>
struct VectorSlot {
  const char* role;
  std::vector<float> B::*values;
  int64_t (*size)(const ModelConfig&);
  bool optional;  // present only in some architectures (Qwen3's per-head q/k norms)
};

namespace block_shapes {
inline int64_t Hidden(const ModelConfig& c) { return c.hidden_size; }
inline int64_t Q(const ModelConfig& c) { return c.q_dim(); }
inline int64_t Kv(const ModelConfig& c) { return c.kv_dim(); }
inline int64_t Head(const ModelConfig& c) { return c.head_dim; }
inline int64_t Inter(const ModelConfig& c) { return c.intermediate_size; }
}  // namespace block_shapes

inline constexpr LinearSlot<AttentionBlock> kAttentionLinears[] = {
    {"attn_q", LinearInput::kQkv, &AttentionBlock::q, block_shapes::Q, block_shapes::Hidden},
    {"attn_k", LinearInput::kQkv, &AttentionBlock::k, block_shapes::Kv, block_shapes::Hidden},
    {"attn_v", LinearInput::kQkv, &AttentionBlock::v, block_shapes::Kv, block_shapes::Hidden},
    {"attn_output", LinearInput::kO, &AttentionBlock::o, block_shapes::Hidden, block_shapes::Q}};
inline constexpr VectorSlot<AttentionBlock> kAttentionVectors[] = {
    {"attn_norm", &AttentionBlock::norm, block_shapes::Hidden, false},
    {"attn_q_norm", &AttentionBlock::q_norm, block_shapes::Head, true},
    {"attn_k_norm", &AttentionBlock::k_norm, block_shapes::Head, true},
    {"post_attention_norm", &AttentionBlock::post_norm, block_shapes::Hidden, true}};
inline constexpr LinearSlot<MlpBlock> kMlpLinears[] = {
    {"ffn_gate", LinearInput::kGateUp, &MlpBlock::gate, block_shapes::Inter, block_shapes::Hidden},
    {"ffn_up", LinearInput::kGateUp, &MlpBlock::up, block_shapes::Inter, block_shapes::Hidden},
    {"ffn_down", LinearInput::kDown, &MlpBlock::down, block_shapes::Hidden, block_shapes::Inter}};
inline constexpr VectorSlot<MlpBlock> kMlpVectors[] = {
    {"ffn_norm", &MlpBlock::norm, block_shapes::Hidden, false},
    {"post_ffw_norm", &MlpBlock::post_norm, block_shapes::Hidden, true}};

// Every tensor a bound `block` holds, as its checkpoint names it: linear(role, input, weight)
// for each linear, vector(role, values) for each vector it has (an optional one only when set).
template <typename LinearFn, typename VectorFn>
void ForEachBlockTensor(const Block& block, LinearFn&& linear, VectorFn&& vector) {
  std::visit(
      [&](const auto& blk) {
        using T = std::decay_t<decltype(blk)>;
        const auto& [linears, vectors] = [] {
          if constexpr (std::is_same_v<T, AttentionBlock>) {
            return std::pair(std::span(kAttentionLinears), std::span(kAttentionVectors));
          } else {
            return std::pair(std::span(kMlpLinears), std::span(kMlpVectors));
          }
        }();
        for (const auto& s : vectors) {
          if (!s.optional || !(blk.*s.values).empty()) vector(s.role, blk.*s.values);
        }
        for (const auto& s : linears) linear(s.role, s.input, blk.*s.weight);
      },
      block);
}

// One layer: its blocks in order. A layer's output (the residual stream after its last block)
// is what a tap (ForwardHooks::tap_layers) reads.
struct ProgramLayer {
  std::vector<Block> blocks;
};

// Per-sequence state the program's blocks declare (the sequence-state manifest's model side).
struct SequenceStateSpec {
  int kv_layers = 0;  // paged K/V layers: one per attention block
};

struct ModelProgram {
  LinearWeight embedding;        // [vocab, hidden]; rows are looked up, not multiplied
  float embedding_scale = 1.0f;  // looked-up rows are multiplied by this (Gemma: sqrt(hidden))
  std::vector<ProgramLayer> layers;
  std::vector<float> final_norm;  // [hidden]
  LinearWeight lm_head;           // [vocab, hidden]; a copy of `embedding`'s view when tied

  // Numbers the attention blocks' KV layers in program order and returns the state they own.
  // Called once by whoever declares the program (architecture files, tests, benchmarks).
  SequenceStateSpec Finalize();
  SequenceStateSpec state() const;

  // OK when every block is the Llama/Qwen3 one (no sandwich norms, sliding window, local RoPE,
  // GeGLU or embedding scale); else FailedPrecondition naming what `backend` does not run yet.
  // Every backend but the CPU's DecoderModel calls it before it runs a program.
  absl::Status RequireLlamaBlocks(std::string_view backend) const;

  // Every linear layer of every block (quantization, compute modes, reports), in program order.
  template <typename Fn>
  void ForEachLinear(Fn&& fn) {
    for (ProgramLayer& l : layers) {
      for (Block& b : l.blocks) VisitLinears(b, fn);
    }
  }
  template <typename Fn>
  void ForEachLinear(Fn&& fn) const {
    for (const ProgramLayer& l : layers) {
      for (const Block& b : l.blocks) VisitLinears(b, fn);
    }
  }

 private:
  template <typename B, typename Fn>
  static void VisitLinears(B& block, Fn& fn) {
    std::visit(
        [&](auto& blk) {
          using T = std::decay_t<decltype(blk)>;
          if constexpr (std::is_same_v<T, AttentionBlock>) {
            for (const auto& s : kAttentionLinears) fn(blk.*s.weight);
          } else {
            for (const auto& s : kMlpLinears) fn(blk.*s.weight);
          }
        },
        block);
  }
};

// The Llama-family layer (attention then MLP), the shape every architecture here has so far.
ProgramLayer AttentionMlpLayer(AttentionBlock attention, MlpBlock mlp);

// The block of type T in `layer` (the first one), or null.
template <typename T>
const T* FindBlock(const ProgramLayer& layer) {
  for (const Block& b : layer.blocks) {
    if (const T* t = std::get_if<T>(&b)) return t;
  }
  return nullptr;
}

}  // namespace dq
