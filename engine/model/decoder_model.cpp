#include "engine/model/decoder_model.h"

#include <algorithm>

#include "engine/cpu/cpu_ops.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {

struct DecoderModel::Scratch {
  int64_t m = 0;  // tokens in the batch
  std::vector<float> x, h, q, k, v, attn, gate, up;
  std::vector<cpu::AttentionToken> tokens;
  cpu::AttentionOptions attention;
};

namespace {

// A pass CUDA runs with its prefill attention: some item brings several new tokens.
bool PrefillShaped(const Batch& batch) {
  if (batch.phase != Phase::kPrefill) return false;
  return std::any_of(batch.items.begin(), batch.items.end(),
                     [](const BatchItem& it) { return it.tokens.size() > 1; });
}

}  // namespace

DecoderModel::DecoderModel(ModelConfig config, ModelProgram program)
    : config_(std::move(config)), program_(std::move(program)) {
  inv_freq_ = cpu::RopeInverseFrequencies(config_.head_dim, config_.rope_theta);
}

absl::Status DecoderModel::SetOptions(const DecoderModelOptions& options) {
  if (options.fp8_prefill_attention) {
    const LinearWeight* bad = nullptr;
    program_.ForEachLinear([&](const LinearWeight& m) {
      const bool fp8 =
          m.mode == ComputeMode::kW8A8 && m.codec != nullptr && m.codec->scheme() == "fp8";
      if (!fp8 && bad == nullptr) bad = &m;
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
  return absl::OkStatus();
}

absl::Status DecoderModel::Check(const Batch& batch, const KvBlockPool& pool) const {
  for (const BatchItem& it : batch.items) {
    if (it.kv == nullptr || it.tokens.empty()) {
      return absl::InvalidArgumentError("batch item needs a sequence and at least one token");
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
      x += hidden;
    }
  }
}

void DecoderModel::RunAttention(int layer, const AttentionBlock& w, Scratch& s, KvBlockPool& pool,
                                ThreadPool& threads) const {
  const ModelConfig& c = config_;
  cpu::RmsNorm(s.x.data(), w.norm.data(), s.m, c.hidden_size, c.rms_norm_eps, s.h.data());
  Observe(layer, LinearInput::kQkv, s.h, s.m, c.hidden_size);
  cpu::MatMul(w.q, s.h.data(), s.m, s.q.data(), threads);
  cpu::MatMul(w.k, s.h.data(), s.m, s.k.data(), threads);
  cpu::MatMul(w.v, s.h.data(), s.m, s.v.data(), threads);
  if (w.has_qk_norm()) {
    cpu::RmsNorm(s.q.data(), w.q_norm.data(), s.m * c.num_heads, c.head_dim, c.rms_norm_eps,
                 s.q.data());
    cpu::RmsNorm(s.k.data(), w.k_norm.data(), s.m * c.num_kv_heads, c.head_dim, c.rms_norm_eps,
                 s.k.data());
  }
  for (int64_t t = 0; t < s.m; ++t) {
    const cpu::AttentionToken& at = s.tokens[t];
    float* qt = s.q.data() + t * c.q_dim();
    float* kt = s.k.data() + t * c.kv_dim();
    cpu::ApplyRope(qt, c.num_heads, c.head_dim, at.position, inv_freq_.data(), c.rope_style);
    cpu::ApplyRope(kt, c.num_kv_heads, c.head_dim, at.position, inv_freq_.data(), c.rope_style);
    const int32_t block = at.seq->blocks[at.position / pool.block_size()];
    const int slot = at.position % pool.block_size();
    std::copy_n(kt, c.kv_dim(), pool.key(w.kv_layer, block, slot));
    std::copy_n(s.v.data() + t * c.kv_dim(), c.kv_dim(), pool.value(w.kv_layer, block, slot));
  }
  cpu::PagedAttention(pool, w.kv_layer, s.tokens, s.q.data(), c.num_heads, s.attn.data(), threads,
                      s.attention);
  Observe(layer, LinearInput::kO, s.attn, s.m, c.q_dim());
  cpu::MatMul(w.o, s.attn.data(), s.m, s.h.data(), threads);
  cpu::AddInPlace(s.x.data(), s.h.data(), s.m * c.hidden_size);
}

void DecoderModel::RunMlp(int layer, const MlpBlock& w, Scratch& s, ThreadPool& threads) const {
  const ModelConfig& c = config_;
  cpu::RmsNorm(s.x.data(), w.norm.data(), s.m, c.hidden_size, c.rms_norm_eps, s.h.data());
  Observe(layer, LinearInput::kGateUp, s.h, s.m, c.hidden_size);
  cpu::MatMul(w.gate, s.h.data(), s.m, s.gate.data(), threads);
  cpu::MatMul(w.up, s.h.data(), s.m, s.up.data(), threads);
  cpu::SiluMulInPlace(s.gate.data(), s.up.data(), s.m * c.intermediate_size);
  Observe(layer, LinearInput::kDown, s.gate, s.m, c.intermediate_size);
  cpu::MatMul(w.down, s.gate.data(), s.m, s.h.data(), threads);
  cpu::AddInPlace(s.x.data(), s.h.data(), s.m * c.hidden_size);
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
  out->vocab = config_.vocab_size;
  out->values.resize(n_rows * config_.vocab_size);
  cpu::MatMul(program_.lm_head, rows.data(), n_rows, out->values.data(), threads);
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
  for (const BatchItem& it : batch.items) {
    for (size_t i = 0; i < it.tokens.size(); ++i) {
      s.tokens.push_back({it.kv, it.kv->num_tokens + static_cast<int>(i)});
    }
  }
  s.attention.fp8 = options_.fp8_prefill_attention && PrefillShaped(batch);
}

void DecoderModel::RunLayers(int first, Scratch& s, KvBlockPool& pool, ThreadPool& threads,
                             const ForwardHooks& hooks) const {
  const TapSet taps(hooks, config_.num_layers);
  for (int layer = first; layer < static_cast<int>(program_.layers.size()); ++layer) {
    for (const Block& block : program_.layers[layer].blocks) {
      if (const auto* a = std::get_if<AttentionBlock>(&block)) {
        RunAttention(layer, *a, s, pool, threads);
        if (hooks.on_layer_kv_written) hooks.on_layer_kv_written(a->kv_layer);
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
