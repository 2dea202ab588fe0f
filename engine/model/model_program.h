// The model program: what a decoder is, declared once by its architecture file
// (engine/model/<arch>.cpp) and executed by every backend (the CPU's DecoderModel, engine/cuda's
// CudaDecoderModel, the DFlash drafter's layers). A layer is a list of typed blocks over an fp32
// residual stream; each block reads the stream, normalizes it, and adds its output back. Each
// block also declares the per-sequence state it owns (attention: K/V of every token, in the
// paged pool), so the KV cache's shape follows from the program instead of from the config.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "engine/model/linear_weight.h"

namespace dq {

// Pre-norm GQA self-attention with RoPE: x += o(attn(rope(norm?(q(n))), rope(norm?(k(n))), v(n)))
// where n = RMSNorm(x; norm). Owns one layer of the paged K/V pool (`kv_layer`), written for
// every token the block sees.
struct AttentionBlock {
  std::vector<float> norm;    // [hidden]
  LinearWeight q, k, v, o;    // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  std::vector<float> q_norm;  // [head_dim], RMSNorm over each head of q before RoPE; empty: none
  std::vector<float> k_norm;  // [head_dim], the same over k
  int kv_layer = 0;           // set by ModelProgram::Finalize: its layer of the sequence's KV

  bool has_qk_norm() const { return !q_norm.empty(); }
};

// Pre-norm SwiGLU MLP: x += down(silu(gate(n)) * up(n)), n = RMSNorm(x; norm).
struct MlpBlock {
  std::vector<float> norm;      // [hidden]
  LinearWeight gate, up, down;  // [inter, hidden] x2, [hidden, inter]
};

using Block = std::variant<AttentionBlock, MlpBlock>;

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
  LinearWeight embedding;  // [vocab, hidden]; rows are looked up, not multiplied
  std::vector<ProgramLayer> layers;
  std::vector<float> final_norm;  // [hidden]
  LinearWeight lm_head;           // [vocab, hidden]; a copy of `embedding`'s view when tied

  // Numbers the attention blocks' KV layers in program order and returns the state they own.
  // Called once by whoever declares the program (architecture files, tests, benchmarks).
  SequenceStateSpec Finalize();
  SequenceStateSpec state() const;

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
            for (auto* m : {&blk.q, &blk.k, &blk.v, &blk.o}) fn(*m);
          } else {
            for (auto* m : {&blk.gate, &blk.up, &blk.down}) fn(*m);
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
