#include "engine/model/decoder_model.h"

#include <algorithm>
#include <cmath>

#include "common/dtype.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/gated_delta.h"
#include "engine/cpu/q8_packed.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {

namespace {
// How a pass computes its linears beyond their weights (DecoderModelOptions).
struct LinearPolicy {
  bool bf16 = false;  // CUDA's rounding (bf16_activations)
  bool q8 = false;    // the fast 8-bit-activation dots (q8_decode)
};

}  // namespace

struct DecoderModel::Scratch {
  int64_t m = 0;  // tokens in the batch
  std::vector<float> x, h, q, k, v, attn, gate, up;
  std::vector<float> q_raw, attn_gate;  // the output gate's [q | gate] rows and the gate
  std::vector<cpu::AttentionToken> tokens;
  struct Item {
    int64_t first = 0, count = 0;  // its tokens in the pass
    KvSequence* seq = nullptr;
  };
  std::vector<Item> items;
  cpu::AttentionOptions attention;
  bool bf16 = false;  // DecoderModelOptions::bf16_activations
  LinearPolicy linears;
  bool cuda_prefill = false;  // CUDA runs this pass with its prefill kernels (not as decode steps)
};

namespace {

// A pass CUDA runs with its prefill attention: some item brings several new tokens.
bool PrefillShaped(const Batch& batch) {
  if (batch.phase != Phase::kPrefill) return false;
  return std::any_of(batch.items.begin(), batch.items.end(),
                     [](const BatchItem& it) { return it.tokens.size() > 1; });
}

// A pass the CUDA backend runs as decode steps (its Plan::decode): one new token per item, at
// most 64 items. Its other passes fuse the SwiGLU into an FP8 down projection's quantizer.
bool CudaDecodeShaped(const Batch& batch) {
  return batch.items.size() <= 64 &&
         std::all_of(batch.items.begin(), batch.items.end(),
                     [](const BatchItem& it) { return it.tokens.size() == 1; });
}

bool IsFp8W8A8(const LinearWeight& w) {
  return w.mode == ComputeMode::kW8A8 && w.codec != nullptr && w.codec->scheme() == "fp8";
}

// Whether the CUDA backend computes `w` on bf16-rounded weight values for `rows` rows: F32/F16
// matrices are rounded at upload; other weight-only formats dequantize to bf16 for a GEMM above
// 8 rows (below, and for a quantized lm_head, its GEMV dequantizes exactly in fp32).
bool CudaRoundsWeights(const LinearWeight& w, int64_t rows) {
  if (w.mode != ComputeMode::kWeightOnly) return false;
  if (w.codec == nullptr && (w.dtype == DType::kF32 || w.dtype == DType::kF16)) return true;
  return rows > 8 && w.dtype != DType::kBF16;
}

// What the CUDA backend's bf16 buffers do to `n` values when `on` (Scratch::bf16).
void RoundBf16(bool on, float* x, int64_t n) {
  if (!on) return;
  for (int64_t i = 0; i < n; ++i) x[i] = BF16ToF32(F32ToBF16(x[i]));
}

// cpu::MatMul over `rows` rows under `p`.
void Linear(const LinearWeight& w, const float* x, float* y, int64_t rows, LinearPolicy p,
            ThreadPool& threads) {
  cpu::MatMul(w, x, rows, y, threads,
              {.bf16_weights = p.bf16 && CudaRoundsWeights(w, rows), .q8_activations = p.q8});
}

}  // namespace

DecoderModel::DecoderModel(ModelConfig config, ModelProgram program)
    : config_(std::move(config)), program_(std::move(program)) {
  slot_floats_ = program_.state().slot_floats;
  // Partial RoPE (Qwen3.5) rotates the first rope_dim() dims with frequencies of that width.
  inv_freq_ = cpu::RopeInverseFrequencies(config_.rope_dim(), config_.rope_theta);
  for (float& f : inv_freq_) f /= config_.rope_linear_factor;  // "linear" scaling: pos / factor
  inv_freq_local_ = cpu::RopeInverseFrequencies(config_.rope_dim(), config_.rope_local_theta > 0
                                                                        ? config_.rope_local_theta
                                                                        : config_.rope_theta);
}

absl::Status DecoderModel::SetOptions(const DecoderModelOptions& options) {
  if (options.fp8_prefill_attention) {
    const LinearWeight* bad = nullptr;
    program_.ForEachLinear([&](const LinearWeight& m) {
      if (!IsFp8W8A8(m) && bad == nullptr) bad = &m;
    });
    if (bad != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FP8 prefill attention goes with FP8 linears, but the model has a ",
          bad->codec ? std::string(bad->codec->scheme()) : std::string(DTypeName(bad->dtype)), " ",
          ComputeModeName(bad->mode),
          " linear; use an fp8 checkpoint (dq-quantize --format fp8) with compute w8a8, or "
          "exact (bf16) attention"));
    }
  }
  options_ = options;
  if (options.q8_decode) {  // the q8 path reads its rows repacked (cpu::PackLinearForQ8)
    program_.ForEachLinear([](LinearWeight& m) { cpu::PackLinearForQ8(m); });
    cpu::PackLinearForQ8(program_.lm_head);
  }
  return absl::OkStatus();
}

absl::Status DecoderModel::Check(const Batch& batch, const KvBlockPool& pool) const {
  for (const BatchItem& it : batch.items) {
    if (it.kv == nullptr || it.tokens.empty()) {
      return absl::InvalidArgumentError("batch item needs a sequence and at least one token");
    }
    if (slot_floats_ > 0 &&
        (it.kv->state_slot < 0 || pool.state_slots().slot_floats() != slot_floats_)) {
      return absl::FailedPreconditionError(
          "this model keeps recurrent state per sequence, but the sequence has no state slot of "
          "its size; extend it in a pool with the model's state slots (ModelRunner makes one)");
    }
    const int64_t end = it.kv->num_tokens + static_cast<int64_t>(it.tokens.size());
    if (end > config_.max_context) {
      return absl::OutOfRangeError(absl::StrCat(
          "sequence would reach ", end, " tokens; the model's context is ", config_.max_context));
    }
    if (static_cast<int64_t>(it.kv->blocks.size()) * pool.block_size() < end) {
      return absl::FailedPreconditionError("sequence has too few KV blocks for its new tokens");
    }
    for (int32_t t : it.tokens) {
      if (t < 0 || t >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", t, " is outside the vocabulary [0, ", config_.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

void DecoderModel::Embed(const Batch& batch, float* x) const {
  const int64_t hidden = config_.hidden_size;
  for (const BatchItem& it : batch.items) {
    for (int32_t t : it.tokens) {
      DequantizeRow(program_.embedding.dtype, program_.embedding.row(t), x, hidden);
      if (program_.embedding_scale != 1.0f) {
        for (int64_t i = 0; i < hidden; ++i) x[i] *= program_.embedding_scale;
      }
      x += hidden;
    }
  }
}

void DecoderModel::RunAttention(int layer, const AttentionBlock& w, Scratch& s, KvBlockPool& pool,
                                ThreadPool& threads) const {
  const ModelConfig& c = config_;
  cpu::RmsNorm(s.x.data(), w.norm.data(), s.m, c.hidden_size, c.rms_norm_eps, s.h.data());
  RoundBf16(s.bf16, s.h.data(), s.m * c.hidden_size);
  Observe(layer, LinearInput::kQkv, s.h, s.m, c.hidden_size);
  if (w.output_gate) {
    Linear(w.q, s.h.data(), s.q_raw.data(), s.m, s.linears, threads);
    SplitGatedQuery(s);
  } else {
    Linear(w.q, s.h.data(), s.q.data(), s.m, s.linears, threads);
  }
  Linear(w.k, s.h.data(), s.k.data(), s.m, s.linears, threads);
  Linear(w.v, s.h.data(), s.v.data(), s.m, s.linears, threads);
  RoundBf16(s.bf16, s.q.data(), s.m * c.q_dim());
  RoundBf16(s.bf16, s.k.data(), s.m * c.kv_dim());
  RoundBf16(s.bf16, s.v.data(), s.m * c.kv_dim());
  if (w.has_qk_norm()) {
    cpu::RmsNorm(s.q.data(), w.q_norm.data(), s.m * c.num_heads, c.head_dim, c.rms_norm_eps,
                 s.q.data());
    cpu::RmsNorm(s.k.data(), w.k_norm.data(), s.m * c.num_kv_heads, c.head_dim, c.rms_norm_eps,
                 s.k.data());
  }
  const float* inv_freq = w.local_rope ? inv_freq_local_.data() : inv_freq_.data();
  for (int64_t t = 0; t < s.m; ++t) {
    const cpu::AttentionToken& at = s.tokens[t];
    float* qt = s.q.data() + t * c.q_dim();
    float* kt = s.k.data() + t * c.kv_dim();
    if (w.rotary_dim > 0 && w.rotary_dim < c.head_dim) {
      // Partial RoPE: the first rotary_dim dims of each head, paired within them.
      for (int h = 0; h < c.num_heads; ++h) {
        cpu::ApplyRope(qt + h * c.head_dim, 1, w.rotary_dim, at.position, inv_freq, c.rope_style);
      }
      for (int h = 0; h < c.num_kv_heads; ++h) {
        cpu::ApplyRope(kt + h * c.head_dim, 1, w.rotary_dim, at.position, inv_freq, c.rope_style);
      }
    } else {
      cpu::ApplyRope(qt, c.num_heads, c.head_dim, at.position, inv_freq, c.rope_style);
      cpu::ApplyRope(kt, c.num_kv_heads, c.head_dim, at.position, inv_freq, c.rope_style);
    }
    RoundBf16(s.bf16, qt, c.q_dim());
    RoundBf16(s.bf16, kt, c.kv_dim());
    const int32_t block = at.seq->blocks[at.position / pool.block_size()];
    const int slot = at.position % pool.block_size();
    std::copy_n(kt, c.kv_dim(), pool.key(w.kv_layer, block, slot));
    std::copy_n(s.v.data() + t * c.kv_dim(), c.kv_dim(), pool.value(w.kv_layer, block, slot));
  }
  cpu::AttentionOptions attention = s.attention;
  attention.window = w.window;
  attention.scale = c.attention_scale;
  cpu::PagedAttention(pool, w.kv_layer, s.tokens, s.q.data(), c.num_heads, s.attn.data(), threads,
                      attention);
  if (w.output_gate) {
    for (int64_t i = 0; i < s.m * c.q_dim(); ++i) {
      s.attn[i] *= 1.0f / (1.0f + std::exp(-s.attn_gate[i]));
    }
  }
  RoundBf16(s.bf16, s.attn.data(), s.m * c.q_dim());
  Observe(layer, LinearInput::kO, s.attn, s.m, c.q_dim());
  Linear(w.o, s.attn.data(), s.h.data(), s.m, s.linears, threads);
  AddBlockOutput(w.post_norm, s);
}

void DecoderModel::SplitGatedQuery(Scratch& s) const {
  const int hd = config_.head_dim;
  for (int64_t t = 0; t < s.m; ++t) {
    for (int h = 0; h < config_.num_heads; ++h) {
      const float* src = s.q_raw.data() + (t * config_.num_heads + h) * 2 * hd;
      const int64_t dst = (t * config_.num_heads + h) * hd;
      std::copy_n(src, hd, s.q.data() + dst);
      std::copy_n(src + hd, hd, s.attn_gate.data() + dst);
    }
  }
}

void DecoderModel::AddBlockOutput(const std::vector<float>& post_norm, Scratch& s) const {
  const int64_t hidden = config_.hidden_size;
  if (!post_norm.empty()) {
    cpu::RmsNorm(s.h.data(), post_norm.data(), s.m, hidden, config_.rms_norm_eps, s.h.data());
  }
  cpu::AddInPlace(s.x.data(), s.h.data(), s.m * hidden);
}

void DecoderModel::RunMlp(int layer, const MlpBlock& w, Scratch& s, ThreadPool& threads) const {
  const ModelConfig& c = config_;
  cpu::RmsNorm(s.x.data(), w.norm.data(), s.m, c.hidden_size, c.rms_norm_eps, s.h.data());
  RoundBf16(s.bf16, s.h.data(), s.m * c.hidden_size);
  Observe(layer, LinearInput::kGateUp, s.h, s.m, c.hidden_size);
  Linear(w.gate, s.h.data(), s.gate.data(), s.m, s.linears, threads);
  Linear(w.up, s.h.data(), s.up.data(), s.m, s.linears, threads);
  const int64_t gu = s.m * c.intermediate_size;
  RoundBf16(s.bf16, s.gate.data(), gu);
  RoundBf16(s.bf16, s.up.data(), gu);
  if (w.activation == Activation::kGeluTanh) {
    cpu::GeluTanhMulInPlace(s.gate.data(), s.up.data(), gu);
  } else {
    cpu::SiluMulInPlace(s.gate.data(), s.up.data(), gu);
  }
  const bool fused = s.cuda_prefill && IsFp8W8A8(w.down) && w.down.in_features % 8 == 0;
  RoundBf16(s.bf16 && !fused, s.gate.data(), gu);
  Observe(layer, LinearInput::kDown, s.gate, s.m, c.intermediate_size);
  Linear(w.down, s.gate.data(), s.h.data(), s.m, s.linears, threads);
  AddBlockOutput(w.post_norm, s);
}

namespace {

// torch's softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One item's q, k (L2-normalized, each key head repeated for its value heads, as HF's
// repeat_interleave, or tiled as llama.cpp orders them), v, log decay g and beta from its conv
// outputs and b/a projections.
struct DeltaInputs {
  std::vector<float> q, k, v, g, beta;
};

DeltaInputs GatherDeltaInputs(const GatedDeltaBlock& w, bool tiled, int64_t n, float* conv_out,
                              const float* b, const float* a) {
  const int nk = w.key_heads, nv = w.value_heads, dk = w.key_dim, dv = w.value_dim;
  const int qk = nk * dk, channels = w.conv_channels(), rep = nv / nk;
  DeltaInputs in;
  in.q.resize(n * nv * dk);
  in.k.resize(n * nv * dk);
  in.v.resize(n * nv * dv);
  in.g.resize(n * nv);
  in.beta.resize(n * nv);
  for (int64_t t = 0; t < n; ++t) {
    float* row = conv_out + t * channels;
    cpu::L2NormRows(row, 2 * nk, dk);  // q's heads then k's
    for (int h = 0; h < nv; ++h) {
      const int kh = tiled ? h % nk : h / rep;
      std::copy_n(row + kh * dk, dk, in.q.data() + (t * nv + h) * dk);
      std::copy_n(row + qk + kh * dk, dk, in.k.data() + (t * nv + h) * dk);
      const float bt = b[t * nv + h], at = a[t * nv + h];
      in.beta[t * nv + h] = 1.0f / (1.0f + std::exp(-bt));
      in.g[t * nv + h] = -std::exp(w.a_log[h]) * Softplus(at + w.dt_bias[h]);
    }
    std::copy_n(row + 2 * qk, nv * dv, in.v.data() + t * nv * dv);
  }
  return in;
}

}  // namespace

void DecoderModel::RunGatedDelta(int layer, const GatedDeltaBlock& w, Scratch& s, KvBlockPool& pool,
                                 ThreadPool& threads) const {
  const ModelConfig& c = config_;
  const int channels = w.conv_channels(), nv = w.value_heads, vd = nv * w.value_dim;
  cpu::RmsNorm(s.x.data(), w.norm.data(), s.m, c.hidden_size, c.rms_norm_eps, s.h.data());
  RoundBf16(s.bf16, s.h.data(), s.m * c.hidden_size);
  Observe(layer, LinearInput::kGdnIn, s.h, s.m, c.hidden_size);
  std::vector<float> mixed(s.m * channels), z(s.m * vd), b(s.m * nv), a(s.m * nv);
  Linear(w.qkv, s.h.data(), mixed.data(), s.m, s.linears, threads);
  Linear(w.z, s.h.data(), z.data(), s.m, s.linears, threads);
  Linear(w.b, s.h.data(), b.data(), s.m, s.linears, threads);
  Linear(w.a, s.h.data(), a.data(), s.m, s.linears, threads);
  std::vector<float> conv_out(s.m * channels), core(s.m * vd);
  const cpu::GatedDeltaShape shape{nv, w.key_dim, w.value_dim};
  for (const Scratch::Item& it : s.items) {
    float* slot = pool.state_slots().slot(it.seq->state_slot) + w.state_offset;
    float* delta = slot + w.conv_state_floats();
    cpu::CausalConv1dSilu(channels, w.kernel, it.count, mixed.data() + it.first * channels,
                          w.conv.data(), slot, conv_out.data() + it.first * channels);
    const DeltaInputs in = GatherDeltaInputs(w, c.gdn_tiled_value_heads, it.count,
                                             conv_out.data() + it.first * channels,
                                             b.data() + it.first * nv, a.data() + it.first * nv);
    float* out = core.data() + it.first * vd;
    if (it.count > 1) {
      cpu::GatedDeltaChunked(shape, it.count, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                             in.beta.data(), delta, out);
    } else {
      cpu::GatedDeltaRecurrent(shape, it.count, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                               in.beta.data(), delta, out);
    }
  }
  cpu::GatedRmsNorm(core.data(), z.data(), w.gate_norm.data(), s.m * nv, w.value_dim,
                    c.rms_norm_eps, core.data());
  Observe(layer, LinearInput::kGdnOut, core, s.m, vd);
  Linear(w.out, core.data(), s.h.data(), s.m, s.linears, threads);
  AddBlockOutput({}, s);
}

void DecoderModel::Logits(const Batch& batch, Scratch& s, ThreadPool& threads,
                          BatchLogits* out) const {
  const int64_t hidden = config_.hidden_size;
  // Gather the rows whose logits are wanted, then normalize and project only those.
  std::vector<float> rows;
  out->item_first_row.clear();
  int64_t token = 0, n_rows = 0;
  for (const BatchItem& it : batch.items) {
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    const int64_t first = it.all_logits ? token : token + n - 1;
    out->item_first_row.push_back(n_rows);
    for (int64_t t = first; t < token + n; ++t, ++n_rows) {
      rows.insert(rows.end(), s.x.begin() + t * hidden, s.x.begin() + (t + 1) * hidden);
    }
    token += n;
  }
  cpu::RmsNorm(rows.data(), program_.final_norm.data(), n_rows, hidden, config_.rms_norm_eps,
               rows.data());
  RoundBf16(s.bf16, rows.data(), n_rows * hidden);
  out->vocab = config_.vocab_size;
  out->values.resize(n_rows * config_.vocab_size);
  // The lm_head takes the GEMV (exact dequantization) at any row count on CUDA when quantized.
  cpu::MatMul(program_.lm_head, rows.data(), n_rows, out->values.data(), threads,
              {.bf16_weights = s.bf16 && CudaRoundsWeights(program_.lm_head, 0),
               .q8_activations = s.linears.q8});
}

void DecoderModel::Prepare(const Batch& batch, Scratch& s) const {
  const ModelConfig& c = config_;
  s.m = batch.num_tokens();
  s.x.resize(s.m * c.hidden_size);
  s.h.resize(s.m * c.hidden_size);
  s.q.resize(s.m * c.q_dim());
  s.attn.resize(s.m * c.q_dim());
  s.k.resize(s.m * c.kv_dim());
  s.v.resize(s.m * c.kv_dim());
  s.gate.resize(s.m * c.intermediate_size);
  s.up.resize(s.m * c.intermediate_size);
  if (c.attn_output_gate) {
    s.q_raw.resize(s.m * c.q_proj_dim());
    s.attn_gate.resize(s.m * c.q_dim());
  }
  int64_t first = 0;
  for (const BatchItem& it : batch.items) {
    const auto n = static_cast<int64_t>(it.tokens.size());
    s.items.push_back({first, n, it.kv});
    first += n;
    for (size_t i = 0; i < it.tokens.size(); ++i) {
      s.tokens.push_back({it.kv, it.kv->num_tokens + static_cast<int>(i)});
    }
  }
  s.attention.fp8 = options_.fp8_prefill_attention && PrefillShaped(batch);
  s.bf16 = options_.bf16_activations;
  s.linears = {s.bf16, options_.q8_decode && !s.bf16 && batch.phase == Phase::kDecode};
  s.cuda_prefill = !CudaDecodeShaped(batch);
  if (s.bf16 && s.cuda_prefill && !s.attention.fp8) {
    s.attention.bf16_p_key_tile = options_.cuda_prefill_key_tile;
  }
}

void DecoderModel::RunLayers(int first, Scratch& s, KvBlockPool& pool, ThreadPool& threads,
                             const ForwardHooks& hooks) const {
  const TapSet taps(hooks, config_.num_layers);
  for (int layer = first; layer < static_cast<int>(program_.layers.size()); ++layer) {
    for (const Block& block : program_.layers[layer].blocks) {
      if (const auto* a = std::get_if<AttentionBlock>(&block)) {
        RunAttention(layer, *a, s, pool, threads);
        if (hooks.on_layer_kv_written) hooks.on_layer_kv_written(a->kv_layer);
      } else if (const auto* g = std::get_if<GatedDeltaBlock>(&block)) {
        RunGatedDelta(layer, *g, s, pool, threads);
        if (hooks.on_layer_state_written) hooks.on_layer_state_written(g->state_layer);
      } else {
        RunMlp(layer, std::get<MlpBlock>(block), s, threads);
      }
    }
    if (taps.has(layer)) hooks.on_layer_output(layer, s.x);
  }
}

absl::Status DecoderModel::Forward(const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                                   BatchLogits* logits, const ForwardHooks& hooks) const {
  DQ_RETURN_IF_ERROR(Check(batch, pool));
  Scratch s;
  Prepare(batch, s);
  Embed(batch, s.x.data());
  // CUDA keeps the embedding table in bf16 (a GGUF Q8_0 or f16 table is rounded at upload).
  RoundBf16(s.bf16, s.x.data(), s.m * int64_t{config_.hidden_size});
  RunLayers(0, s, pool, threads, hooks);
  for (const BatchItem& it : batch.items) it.kv->num_tokens += static_cast<int>(it.tokens.size());
  Logits(batch, s, threads, logits);
  return absl::OkStatus();
}

absl::Status DecoderModel::ForwardFrom(int first_layer, std::span<const float> hidden,
                                       const Batch& batch, KvBlockPool& pool, ThreadPool& threads,
                                       BatchLogits* logits) const {
  DQ_RETURN_IF_ERROR(Check(batch, pool));
  const int64_t want = batch.num_tokens() * int64_t{config_.hidden_size};
  if (first_layer < 0 || first_layer > config_.num_layers ||
      static_cast<int64_t>(hidden.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardFrom: layer ", first_layer, " of ", config_.num_layers, " with ", hidden.size(),
        " hidden values; give a layer in range and [tokens, hidden] = ", want, " values"));
  }
  Scratch s;
  Prepare(batch, s);
  std::copy(hidden.begin(), hidden.end(), s.x.begin());
  RunLayers(first_layer, s, pool, threads, {});
  for (const BatchItem& it : batch.items) it.kv->num_tokens += static_cast<int>(it.tokens.size());
  Logits(batch, s, threads, logits);
  return absl::OkStatus();
}

}  // namespace dq
