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

// Which linear layers read an activation: q/k/v share theirs, as do gate/up and a Gated
// DeltaNet's four input projections (calibration and NVFP4's shared global scales are per input).
enum class LinearInput { kQkv, kO, kGateUp, kDown, kGdnIn, kGdnOut };

// Pre-norm GQA self-attention with RoPE: x += o(attn(rope(norm?(q(n))), rope(norm?(k(n))), v(n)))
// where n = RMSNorm(x; norm). Owns one layer of the paged K/V pool (`kv_layer`), written for
// every token the block sees.
struct AttentionBlock {
  std::vector<float> norm;  // [hidden]
  // [q_proj_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  LinearWeight q, k, v, o;
  std::vector<float> q_norm;  // [head_dim], RMSNorm over each head of q before RoPE; empty: none
  std::vector<float> k_norm;  // [head_dim], the same over k
  // [hidden], RMSNorm of the block's output before it joins the stream (Gemma's sandwich
  // norm: x += post_norm(o(...))); empty: none.
  std::vector<float> post_norm;
  int window = 0;           // > 0: sliding-window attention over the latest `window` positions
  bool local_rope = false;  // RoPE with ModelConfig::rope_local_theta (Gemma's local layers)
  // Qwen3.5: q's rows are per head [q | gate] and the attention output is multiplied by
  // sigmoid(gate) before o; RoPE rotates only the first `rotary_dim` dims of a head (0: all).
  bool output_gate = false;
  int rotary_dim = 0;
  int kv_layer = 0;  // set by ModelProgram::Finalize: its layer of the sequence's KV

  bool has_qk_norm() const { return !q_norm.empty(); }
  // Anything beyond the Llama/Qwen3 block, which only the CPU backend runs so far.
  bool extended() const {
    return !post_norm.empty() || window > 0 || local_rope || output_gate || rotary_dim > 0;
  }
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

// Pre-norm Gated DeltaNet (linear attention; Qwen3.5's, HF Qwen3_5GatedDeltaNet):
//   n = RMSNorm(x; norm); q|k|v = silu(causal_conv1d(qkv(n))); q, k L2-normalized per head;
//   beta = sigmoid(b(n)); g = -exp(a_log) * softplus(a(n) + dt_bias) per value head;
//   o = gated delta rule (engine/cpu/gated_delta.h; q/k heads shared by value_heads/key_heads
//   value heads); x += out(gate_norm * RMSNorm(o) * silu(z(n))) per value head.
// Owns a fixed per-sequence state (the conv's last kernel - 1 inputs and the fp32 delta state),
// constant in the sequence's length: `state_floats()` floats at `state_offset` of the
// sequence's state slot.
struct GatedDeltaBlock {
  std::vector<float> norm;  // [hidden]
  // [conv_dim = 2 key_dim + value_dim, hidden], [value_dim, hidden], [value heads, hidden] x2,
  // [hidden, value_dim]
  LinearWeight qkv, z, b, a, out;
  std::vector<float> conv;       // [conv_dim][kernel], depthwise, no bias
  std::vector<float> dt_bias;    // [value heads]
  std::vector<float> a_log;      // [value heads]
  std::vector<float> gate_norm;  // [value_dim of a head]; multiplies by w (not 1 + w)
  int key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, kernel = 0;
  int state_layer = 0;       // set by ModelProgram::Finalize: its index among the GDN blocks
  int64_t state_offset = 0;  // set by Finalize: floats into the sequence's state slot

  int conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
  int64_t conv_state_floats() const { return int64_t{conv_channels()} * (kernel - 1); }
  int64_t delta_state_floats() const { return int64_t{value_heads} * key_dim * value_dim; }
  // Its part of the slot: the conv state ([channels][kernel - 1]) then the delta state
  // ([value heads][key_dim][value_dim]).
  int64_t state_floats() const { return conv_state_floats() + delta_state_floats(); }
  bool extended() const { return true; }  // no backend but the CPU's runs it yet
};

using Block = std::variant<AttentionBlock, MlpBlock, GatedDeltaBlock>;

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
  // Set: the tensor is a depthwise conv's [size / kernel, 1, kernel] weight (HF's Conv1d).
  int64_t (*kernel)(const ModelConfig&) = nullptr;
  // The HF name has no ".weight" suffix (a bare nn.Parameter: dt_bias, A_log).
  bool bare = false;
};

namespace block_shapes {
inline int64_t Hidden(const ModelConfig& c) { return c.hidden_size; }
inline int64_t Q(const ModelConfig& c) { return c.q_dim(); }
inline int64_t Kv(const ModelConfig& c) { return c.kv_dim(); }
inline int64_t Head(const ModelConfig& c) { return c.head_dim; }
inline int64_t Inter(const ModelConfig& c) { return c.intermediate_size; }
inline int64_t QProj(const ModelConfig& c) { return c.q_proj_dim(); }
inline int64_t GdnConv(const ModelConfig& c) { return c.gdn_conv_dim(); }
inline int64_t GdnV(const ModelConfig& c) { return c.gdn_v_dim(); }
inline int64_t GdnVHeads(const ModelConfig& c) { return c.gdn_value_heads; }
inline int64_t GdnVHead(const ModelConfig& c) { return c.gdn_value_dim; }
inline int64_t GdnConvWeights(const ModelConfig& c) {
  return int64_t{c.gdn_conv_dim()} * c.gdn_conv_kernel;
}
inline int64_t GdnKernel(const ModelConfig& c) { return c.gdn_conv_kernel; }
}  // namespace block_shapes

inline constexpr LinearSlot<AttentionBlock> kAttentionLinears[] = {
    {"attn_q", LinearInput::kQkv, &AttentionBlock::q, block_shapes::QProj, block_shapes::Hidden},
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
// GGUF-style roles (llama.cpp's qwen35 names); TensorNames maps them to HF's linear_attn.*.
inline constexpr LinearSlot<GatedDeltaBlock> kGatedDeltaLinears[] = {
    {"attn_qkv", LinearInput::kGdnIn, &GatedDeltaBlock::qkv, block_shapes::GdnConv,
     block_shapes::Hidden},
    {"attn_gate", LinearInput::kGdnIn, &GatedDeltaBlock::z, block_shapes::GdnV,
     block_shapes::Hidden},
    {"ssm_beta", LinearInput::kGdnIn, &GatedDeltaBlock::b, block_shapes::GdnVHeads,
     block_shapes::Hidden},
    {"ssm_alpha", LinearInput::kGdnIn, &GatedDeltaBlock::a, block_shapes::GdnVHeads,
     block_shapes::Hidden},
    {"ssm_out", LinearInput::kGdnOut, &GatedDeltaBlock::out, block_shapes::Hidden,
     block_shapes::GdnV}};
inline constexpr VectorSlot<GatedDeltaBlock> kGatedDeltaVectors[] = {
    {"attn_norm", &GatedDeltaBlock::norm, block_shapes::Hidden, false},
    {"ssm_conv1d", &GatedDeltaBlock::conv, block_shapes::GdnConvWeights, false,
     block_shapes::GdnKernel},
    {"ssm_dt", &GatedDeltaBlock::dt_bias, block_shapes::GdnVHeads, false, nullptr, true},
    {"ssm_a", &GatedDeltaBlock::a_log, block_shapes::GdnVHeads, false, nullptr, true},
    {"ssm_norm", &GatedDeltaBlock::gate_norm, block_shapes::GdnVHead, false}};

// A block type's slot tables.
template <typename T>
constexpr auto BlockSlots() {
  if constexpr (std::is_same_v<T, AttentionBlock>) {
    return std::pair(std::span(kAttentionLinears), std::span(kAttentionVectors));
  } else if constexpr (std::is_same_v<T, MlpBlock>) {
    return std::pair(std::span(kMlpLinears), std::span(kMlpVectors));
  } else {
    return std::pair(std::span(kGatedDeltaLinears), std::span(kGatedDeltaVectors));
  }
}

// Every tensor a bound `block` holds, as its checkpoint names it: linear(role, input, weight)
// for each linear, vector(role, bare, values) for each vector it has (an optional one only when
// set; `bare`: VectorSlot::bare, its HF name has no ".weight").
template <typename LinearFn, typename VectorFn>
void ForEachBlockTensor(const Block& block, LinearFn&& linear, VectorFn&& vector) {
  std::visit(
      [&](const auto& blk) {
        using T = std::decay_t<decltype(blk)>;
        const auto [linears, vectors] = BlockSlots<T>();
        for (const auto& s : vectors) {
          if (!s.optional || !(blk.*s.values).empty()) vector(s.role, s.bare, blk.*s.values);
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
  // A fixed slot per sequence (engine/kvcache/state_slot_pool.h): the recurrent state of every
  // Gated DeltaNet block, constant in the sequence's length; 0 for a pure-attention program.
  int recurrent_layers = 0;
  int64_t slot_floats = 0;
  // The model layer of each paged K/V layer and of each recurrent state, in program order (the
  // order of the pool's layers and of the slot's parts), and each recurrent state's floats.
  std::vector<int> kv_layer_ids;
  std::vector<int> recurrent_layer_ids;
  std::vector<int64_t> recurrent_layer_floats;
  bool has_slot() const { return slot_floats > 0; }
};

struct ModelProgram {
  LinearWeight embedding;        // [vocab, hidden]; rows are looked up, not multiplied
  float embedding_scale = 1.0f;  // looked-up rows are multiplied by this (Gemma: sqrt(hidden))
  std::vector<ProgramLayer> layers;
  std::vector<float> final_norm;  // [hidden]
  LinearWeight lm_head;           // [vocab, hidden]; a copy of `embedding`'s view when tied

  // Numbers the attention blocks' KV layers and lays the GDN blocks' states out in the slot,
  // in program order, and returns the state they own.
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
          for (const auto& s : BlockSlots<T>().first) fn(blk.*s.weight);
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
