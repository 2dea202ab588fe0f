// The CPU backend: executes a model program (model_program.h) block by block in fp32.
#pragma once

#include <functional>

#include "common/status.h"
#include "common/thread_pool.h"
#include "engine/kvcache/kv_block_pool.h"
#include "engine/model/batch.h"
#include "engine/model/forward_model.h"
#include "engine/model/model_config.h"
#include "engine/model/model_program.h"

namespace dq {

// Sees each linear layer's input during a forward pass (calibration of activation scales).
using LinearObserver =
    std::function<void(int layer, LinearInput which, const float* x, int64_t rows, int64_t n)>;

// How the CPU forward pass computes, beyond its weights' compute modes.
struct DecoderModelOptions {
  // Prefill passes (Phase::kPrefill with some item of several new tokens) run attention in
  // emulated FP8 (cpu::Fp8PagedAttention), the numerics of cuda::CudaBackendOptions::
  // fp8_attention; decode-shaped passes (one new token per item) stay exact, as on CUDA, whose
  // decode kernel runs them. Only for a model whose layer linears all compute FP8 W8A8.
  bool fp8_prefill_attention = false;
  // Compute as the CUDA backend rounds (cuda_model_forward.cpp), both phases: activations to
  // bf16 where it stores them in bf16 (the embedding rows, norm outputs, q/k/v before and after
  // QK-norm and RoPE, so the KV cache, attention outputs, gate/up and the SwiGLU product except
  // where FP8 prefill fuses it into the quantizer), the weights it rounds to bf16
  // (cpu::MatMul's bf16_weights), and prefill attention's P (cuda_prefill_key_tile). A test
  // oracle: in W8A8/W4A4 the activation codes then follow the GPU's instead of landing on
  // neighbouring codes, so top-1 can be judged (tests/gpu/model_compare.h).
  bool bf16_activations = false;
  // With bf16_activations: prefill-shaped passes run attention with the numerics of CUDA's bf16
  // prefill kernel (cpu::AttentionOptions::bf16_p_key_tile) with key tiles of this many keys:
  // 64, the default kernel's (KernelOptions::prefill_attention wg64pp).
  int cuda_prefill_key_tile = 64;
  // The fast CPU decode path (issue 25): decode passes (Phase::kDecode, any batch) quantize the
  // inputs of GGUF Q4_1 / Q8_0 linears to 8-bit blocks and use integer dots (cpu::MatMulOptions::
  // q8_activations), as llama.cpp does; prefill passes stay exact, so the first token is the
  // reference's and a sequence's steps do not depend on its batch-mates. Off: the fp32 reference.
  bool q8_decode = false;
};

class DecoderModel : public ForwardModel {
 public:
  // `program` must be finalized (ModelProgram::Finalize) and fit `config`'s shapes.
  DecoderModel(ModelConfig config, ModelProgram program);

  const ModelConfig& config() const override { return config_; }
  std::string_view backend() const override { return "cpu"; }
  // The program and its bound weights (a device backend uploads its copy from these).
  const ModelProgram& program() const { return program_; }
  // Installs (or, with {}, removes) an observer of linear-layer inputs. Not thread-safe with
  // a concurrent Forward.
  void set_observer(LinearObserver observer) { observer_ = std::move(observer); }
  // InvalidArgument (and nothing set) for fp8_prefill_attention when a layer linear is not FP8
  // W8A8. Not thread-safe with a concurrent Forward.
  absl::Status SetOptions(const DecoderModelOptions& options);
  const DecoderModelOptions& options() const { return options_; }

  // Runs `batch`: writes each item's new K/V into `pool` and advances kv->num_tokens.
  // Preconditions (checked, error on violation): every item has blocks for its new tokens,
  // token ids are in the vocabulary, positions stay below max_context.
  absl::Status Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                       BatchLogits* logits, const ForwardHooks& hooks = {}) const override;
  // Forward from `hidden`, the residual stream entering layer `first_layer` ([tokens, hidden]
  // fp32 in batch order: another backend's tap of layer first_layer - 1), instead of from the
  // embedding: runs layers [first_layer, end) and the head, writes only those layers' K/V,
  // advances kv->num_tokens. So one backend's last layers can be checked on the other's input,
  // with one layer's rounding noise instead of the whole model's (tests/gpu/model_compare.h).
  absl::Status ForwardFrom(int first_layer, std::span<const float> hidden, const Batch& batch,
                           KvBlockPool& pool, ThreadPool& threads, BatchLogits* logits) const;

 private:
  struct Scratch;
  absl::Status Check(const Batch& batch, const KvBlockPool& pool) const;
  void Embed(const Batch& batch, float* x) const;
  void RunAttention(int layer, const AttentionBlock& w, Scratch& s, KvBlockPool& pool,
                    ThreadPool& threads) const;
  void RunMlp(int layer, const MlpBlock& w, Scratch& s, ThreadPool& threads) const;
  // Each item's tokens through the block on its sequence's state slot: the chunked form for
  // several tokens (prefill), the recurrent step for one (decode).
  void RunGatedDelta(int layer, const GatedDeltaBlock& w, Scratch& s, KvBlockPool& pool,
                     ThreadPool& threads) const;
  // The output gate's q rows ([q | gate] per head) into s.q and s.attn_gate.
  void SplitGatedQuery(Scratch& s) const;
  // x += post_norm(h) (h alone when the block has no output norm).
  void AddBlockOutput(const std::vector<float>& post_norm, Scratch& s) const;
  void Logits(const Batch& batch, Scratch& s, ThreadPool& threads, BatchLogits* out) const;
  void Prepare(const Batch& batch, Scratch& s) const;
  // Layers [first, end) over s.x; taps and KV hooks as Forward's.
  void RunLayers(int first, Scratch& s, KvBlockPool& pool, ThreadPool& threads,
                 const ForwardHooks& hooks) const;

  ModelConfig config_;
  ModelProgram program_;
  void Observe(int layer, LinearInput which, const std::vector<float>& x, int64_t rows,
               int64_t n) const {
    if (observer_) observer_(layer, which, x.data(), rows, n);
  }

  std::vector<float> inv_freq_;        // RoPE of the global layers
  std::vector<float> inv_freq_local_;  // of the local ones (AttentionBlock::local_rope)
  LinearObserver observer_;
  DecoderModelOptions options_;
  int64_t slot_floats_ = 0;  // the program's per-sequence state (SequenceStateSpec::slot_floats)
};

}  // namespace dq
