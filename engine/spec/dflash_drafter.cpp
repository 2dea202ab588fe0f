#include "engine/spec/dflash_drafter.h"

#include <algorithm>
#include <filesystem>

#include "engine/checkpoint/open_checkpoint.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/model/architecture.h"
#include "engine/model/tensor_names.h"
#include "engine/model/weight_binder.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {
namespace {

absl::StatusOr<DFlashWeights> BindWeights(const Checkpoint& draft, const DFlashConfig& c,
                                          const Checkpoint& target, const ModelConfig& tc) {
  const ModelConfig& lc = c.layers;
  const WeightBinder binder(draft, lc.quant);
  DFlashWeights w;
  const int64_t fc_in = static_cast<int64_t>(c.target_layer_ids.size()) * tc.hidden_size;
  DQ_ASSIGN_OR_RETURN(w.fc, binder.Matrix("fc.weight", lc.hidden_size, fc_in));
  DQ_ASSIGN_OR_RETURN(w.hidden_norm, binder.Vector("hidden_norm.weight", lc.hidden_size));
  DQ_ASSIGN_OR_RETURN(w.norm, binder.Vector("norm.weight", lc.hidden_size));
  const TensorNames names(/*gguf=*/false, "layers.");
  for (int i = 0; i < lc.num_layers; ++i) {
    DQ_ASSIGN_OR_RETURN(AttentionBlock a, BindAttentionBlock(binder, names, lc, i, true));
    DQ_ASSIGN_OR_RETURN(MlpBlock m, BindMlpBlock(binder, names, lc, i));
    w.layers.push_back(AttentionMlpLayer(std::move(a), std::move(m)));
  }
  // The target's embeddings, lm_head and final norm, where its own forward pass reads them.
  const WeightBinder target_binder(target, tc.quant);
  ModelProgram tw;
  DQ_RETURN_IF_ERROR(
      BindEmbeddingsAndHead(target_binder, TensorNames(target.format() == "gguf"), tc, &tw));
  if (tw.embedding.codec != nullptr) {
    return absl::UnimplementedError(
        "the target's embeddings are stored in a quantization scheme; the dflash drafter reads "
        "plain or GGUF-block embeddings only");
  }
  w.embedding = std::move(tw.embedding);
  w.lm_head = std::move(tw.lm_head);
  w.last_norm = std::move(tw.final_norm);
  return w;
}

int32_t Argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);  // lowest id on ties
}

}  // namespace

struct DFlashDrafter::Scratch {
  int64_t ctx_rows = 0;    // new context tokens over all items
  int64_t block_rows = 0;  // items * block_size
  std::vector<float> ctx;  // [ctx_rows, hidden]: hidden_norm(fc(features))
  std::vector<float> x, h, q, k, v, attn, gate, up;
  std::vector<cpu::AttentionToken> queries;  // one per block row
  RowPositions ctx_pos, block_pos;           // each row's blocks and position
};

DFlashDrafter::DFlashDrafter(DFlashConfig config, ModelConfig target, DFlashWeights weights,
                             const DFlashDrafterOptions& options)
    : config_(std::move(config)),
      target_(std::move(target)),
      weights_(std::move(weights)),
      pool_([&] {
        KvCacheOptions kv;
        kv.num_layers = config_.layers.num_layers;
        kv.num_kv_heads = config_.layers.num_kv_heads;
        kv.head_dim = config_.layers.head_dim;
        kv.block_size = options.kv_block_size;
        const int capacity =
            options.kv_capacity > 0 ? options.kv_capacity : std::min(target_.max_context, 8192);
        // Room for the context plus one block on top of it.
        kv.num_blocks = (capacity + config_.block_size + kv.block_size - 1) / kv.block_size;
        return kv;
      }()),
      threads_(options.threads > 0 ? options.threads : DefaultThreadCount()) {
  context_limit_ = target_.max_context;
  inv_freq_ = cpu::RopeInverseFrequencies(config_.layers.head_dim, config_.layers.rope_theta);
}

absl::StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::Create(
    const Checkpoint& draft, const DFlashConfig& config, const Checkpoint& target,
    const ModelConfig& target_config, const DFlashDrafterOptions& options) {
  DQ_RETURN_IF_ERROR(CheckDFlashTarget(config, target_config));
  if (options.kv_block_size <= 0) {
    return absl::InvalidArgumentError("dflash drafter: kv_block_size must be positive");
  }
  auto weights = BindWeights(draft, config, target, target_config);
  if (!weights.ok()) {
    return absl::Status(weights.status().code(),
                        absl::StrCat("dflash drafter: ", weights.status().message()));
  }
  return std::unique_ptr<DFlashDrafter>(
      new DFlashDrafter(config, target_config, std::move(*weights), options));
}

absl::StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::Load(
    const std::string& dir, const Checkpoint& target, const ModelConfig& target_config,
    const DFlashDrafterOptions& options, std::unique_ptr<Checkpoint>* checkpoint) {
  if (!std::filesystem::is_directory(dir)) {
    return absl::NotFoundError(
        absl::StrCat("dflash drafter: ", dir,
                     " is not a directory; give the DFlash checkpoint's directory "
                     "(config.json + *.safetensors)"));
  }
  DQ_ASSIGN_OR_RETURN(const DFlashConfig config, ReadDFlashConfig(dir));
  DQ_ASSIGN_OR_RETURN(*checkpoint, OpenCheckpoint(dir));
  return Create(**checkpoint, config, target, target_config, options);
}

absl::Status DFlashDrafter::CheckTarget(const ModelConfig& target) const {
  return CheckDFlashTarget(config_, target);
}

int DFlashDrafter::pending_rows(const State& s) const {
  const int64_t width = static_cast<int64_t>(config_.target_layer_ids.size()) * target_.hidden_size;
  return static_cast<int>(static_cast<int64_t>(s.pending.size()) / width);
}

int DFlashDrafter::context_tokens(uint64_t sequence) const {
  auto it = states_.find(sequence);
  return it == states_.end() ? 0 : it->second.kv.num_tokens + pending_rows(it->second);
}

absl::Status DFlashDrafter::Begin(uint64_t sequence, std::span<const int32_t>) {
  End(sequence);
  states_[sequence];
  return absl::OkStatus();
}

void DFlashDrafter::End(uint64_t sequence) {
  auto it = states_.find(sequence);
  if (it == states_.end()) return;
  pool_.release(it->second.kv);
  states_.erase(it);
}

void DFlashDrafter::ObserveTarget(uint64_t sequence, int first, int count,
                                  std::span<const float> features) {
  State& s = states_[sequence];
  const int hidden = target_.hidden_size;
  const int width = static_cast<int>(config_.target_layer_ids.size()) * hidden;
  if (count <= 0 || static_cast<int64_t>(features.size()) != int64_t{count} * width) {
    s.broken = true;
    return;
  }
  // Positions past `first` are superseded (a caller that re-observes after a rollback).
  if (first < s.kv.num_tokens) {
    pool_.truncate(s.kv, first);
    s.pending.clear();
  } else if (first <= s.kv.num_tokens + pending_rows(s)) {
    s.pending.resize(static_cast<size_t>(first - s.kv.num_tokens) * width);
  } else {
    s.broken = true;  // a gap: the drafter would attend to positions it never saw
    return;
  }
  const size_t base = s.pending.size();
  s.pending.insert(s.pending.end(), features.begin(), features.end());
  NormalizeFeatures(s.pending.data() + base, count);
}

void DFlashDrafter::NormalizeFeatures(float* features, int count) const {
  const int hidden = target_.hidden_size;
  const int64_t width = static_cast<int64_t>(config_.target_layer_ids.size()) * hidden;
  for (size_t j = 0; j < config_.target_layer_ids.size(); ++j) {
    if (config_.target_layer_ids[j] != target_.num_layers - 1) continue;
    for (int t = 0; t < count; ++t) {
      float* row = features + t * width + static_cast<int64_t>(j) * hidden;
      cpu::RmsNorm(row, weights_.last_norm.data(), 1, hidden, target_.rms_norm_eps, row);
    }
  }
}

bool DFlashDrafter::Ready(State& s, int position) {
  if (s.broken || s.kv.num_tokens + pending_rows(s) != position) return false;
  const int end = position + config_.block_size;
  if (end > context_limit_ || !pool_.can_extend(s.kv, end)) return false;
  pool_.extend(s.kv, end);
  return true;
}

absl::Status DFlashDrafter::Propose(std::span<const DraftRequest> requests,
                                    std::span<Draft> drafts) {
  if (drafts.size() != requests.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dflash drafter: ", requests.size(),
                                                   " requests but ", drafts.size(), " drafts"));
  }
  std::vector<Item> items;
  std::vector<size_t> owner;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    drafts[i].tokens.clear();
    drafts[i].probs.clear();
    auto it = states_.find(r.sequence);
    if (r.max_tokens <= 0 || r.history.empty() || it == states_.end()) continue;
    const int position = static_cast<int>(r.history.size()) - 1;
    if (!Ready(it->second, position)) continue;
    const int rows = std::min(r.max_tokens, config_.block_size - 1);
    items.push_back({&it->second, r.history.back(), position, rows});
    owner.push_back(i);
  }
  if (items.empty()) return absl::OkStatus();
  std::vector<float> logits;
  DQ_RETURN_IF_ERROR(Forward(items, &logits));
  const int vocab = target_.vocab_size;
  const float* row = logits.data();
  for (size_t i = 0; i < items.size(); ++i) {
    for (int j = 0; j < items[i].rows; ++j, row += vocab) {
      drafts[owner[i]].tokens.push_back(Argmax(row, vocab));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DFlashDrafter::BlockLogits(uint64_t sequence, int32_t anchor,
                                                              int position) {
  auto it = states_.find(sequence);
  if (it == states_.end() || !Ready(it->second, position)) {
    return absl::FailedPreconditionError(absl::StrCat("dflash drafter: sequence ", sequence,
                                                      " has no complete context of ", position,
                                                      " tokens (or no KV room) to draft from"));
  }
  if (anchor < 0 || anchor >= target_.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("dflash drafter: anchor token ", anchor, " is outside the vocabulary"));
  }
  Item item{&it->second, anchor, position, config_.block_size - 1};
  std::vector<float> logits;
  DQ_RETURN_IF_ERROR(Forward(std::span<Item>(&item, 1), &logits));
  return logits;
}

void DFlashDrafter::ProjectContext(std::span<Item> items, Scratch& s) {
  std::vector<float> features;
  for (Item& it : items) {
    features.insert(features.end(), it.state->pending.begin(), it.state->pending.end());
    const int first = it.state->kv.num_tokens;
    for (int p = first; p < it.position; ++p) s.ctx_pos.push_back({&it.state->kv, p});
  }
  ProjectFeatures(features.data(), static_cast<int64_t>(s.ctx_pos.size()), s);
}

void DFlashDrafter::ProjectFeatures(const float* features, int64_t rows, Scratch& s) {
  const int hidden = config_.layers.hidden_size;
  s.ctx_rows = rows;
  s.ctx.resize(s.ctx_rows * hidden);
  if (s.ctx_rows == 0) return;
  cpu::MatMul(weights_.fc, features, s.ctx_rows, s.ctx.data(), threads_);
  cpu::RmsNorm(s.ctx.data(), weights_.hidden_norm.data(), s.ctx_rows, hidden,
               config_.layers.rms_norm_eps, s.ctx.data());
}

void DFlashDrafter::WriteKv(int layer, const float* in, int64_t rows, const RowPositions& where,
                            Scratch& s) {
  if (rows == 0) return;
  const AttentionBlock& w = *FindBlock<AttentionBlock>(weights_.layers[layer]);
  const ModelConfig& c = config_.layers;
  cpu::MatMul(w.k, in, rows, s.k.data(), threads_);
  cpu::MatMul(w.v, in, rows, s.v.data(), threads_);
  cpu::RmsNorm(s.k.data(), w.k_norm.data(), rows * c.num_kv_heads, c.head_dim, c.rms_norm_eps,
               s.k.data());
  for (int64_t t = 0; t < rows; ++t) {
    const auto [kv, pos] = where[t];
    float* kt = s.k.data() + t * c.kv_dim();
    cpu::ApplyRope(kt, c.num_kv_heads, c.head_dim, pos, inv_freq_.data(), c.rope_style);
    const int32_t block = kv->blocks[pos / pool_.block_size()];
    const int slot = pos % pool_.block_size();
    std::copy_n(kt, c.kv_dim(), pool_.key(layer, block, slot));
    std::copy_n(s.v.data() + t * c.kv_dim(), c.kv_dim(), pool_.value(layer, block, slot));
  }
}

void DFlashDrafter::Layer(int layer, Scratch& s) {
  const AttentionBlock& w = *FindBlock<AttentionBlock>(weights_.layers[layer]);
  const MlpBlock& f = *FindBlock<MlpBlock>(weights_.layers[layer]);
  const ModelConfig& c = config_.layers;
  const int64_t m = s.block_rows;
  cpu::RmsNorm(s.x.data(), w.norm.data(), m, c.hidden_size, c.rms_norm_eps, s.h.data());
  cpu::MatMul(w.q, s.h.data(), m, s.q.data(), threads_);
  cpu::RmsNorm(s.q.data(), w.q_norm.data(), m * c.num_heads, c.head_dim, c.rms_norm_eps,
               s.q.data());
  // K/V of the new context rows (projected features, not layer-normed) and of the block rows.
  WriteKv(layer, s.ctx.data(), s.ctx_rows, s.ctx_pos, s);
  WriteKv(layer, s.h.data(), m, s.block_pos, s);
  for (int64_t t = 0; t < m; ++t) {
    cpu::ApplyRope(s.q.data() + t * c.q_dim(), c.num_heads, c.head_dim, s.block_pos[t].second,
                   inv_freq_.data(), c.rope_style);
  }
  cpu::PagedAttention(pool_, layer, s.queries, s.q.data(), c.num_heads, s.attn.data(), threads_);
  cpu::MatMul(w.o, s.attn.data(), m, s.h.data(), threads_);
  cpu::AddInPlace(s.x.data(), s.h.data(), m * c.hidden_size);
  cpu::RmsNorm(s.x.data(), f.norm.data(), m, c.hidden_size, c.rms_norm_eps, s.h.data());
  cpu::MatMul(f.gate, s.h.data(), m, s.gate.data(), threads_);
  cpu::MatMul(f.up, s.h.data(), m, s.up.data(), threads_);
  cpu::SiluMulInPlace(s.gate.data(), s.up.data(), m * c.intermediate_size);
  cpu::MatMul(f.down, s.gate.data(), m, s.h.data(), threads_);
  cpu::AddInPlace(s.x.data(), s.h.data(), m * c.hidden_size);
}

absl::Status DFlashDrafter::Forward(std::span<Item> items, std::vector<float>* logits) {
  const ModelConfig& c = config_.layers;
  const int bs = config_.block_size;
  Scratch s;
  ProjectContext(items, s);
  s.block_rows = static_cast<int64_t>(items.size()) * bs;
  const int64_t m = s.block_rows;
  s.x.resize(m * c.hidden_size);
  s.h.resize(m * c.hidden_size);
  s.q.resize(m * c.q_dim());
  s.attn.resize(m * c.q_dim());
  s.k.resize(std::max(m, s.ctx_rows) * c.kv_dim());
  s.v.resize(std::max(m, s.ctx_rows) * c.kv_dim());
  s.gate.resize(m * c.intermediate_size);
  s.up.resize(m * c.intermediate_size);
  float* x = s.x.data();
  for (const Item& it : items) {
    for (int j = 0; j < bs; ++j, x += c.hidden_size) {
      const int32_t token = j == 0 ? it.anchor : config_.mask_token_id;
      DequantizeRow(weights_.embedding.dtype, weights_.embedding.row(token), x, c.hidden_size);
      s.block_pos.push_back({&it.state->kv, it.position + j});
      // Non-causal: every block query sees the whole context and the whole block.
      s.queries.push_back({&it.state->kv, it.position + bs - 1});
    }
  }
  for (int layer = 0; layer < c.num_layers; ++layer) Layer(layer, s);
  // The context is now in the pool; the block's K/V is dropped (its blocks go back).
  std::vector<float> rows;
  for (size_t i = 0; i < items.size(); ++i) {
    State& st = *items[i].state;
    st.pending.clear();
    st.kv.num_tokens = items[i].position;
    pool_.truncate(st.kv, items[i].position);
    const float* first = s.x.data() + (static_cast<int64_t>(i) * bs + 1) * c.hidden_size;
    rows.insert(rows.end(), first, first + int64_t{items[i].rows} * c.hidden_size);
  }
  const int64_t n = static_cast<int64_t>(rows.size()) / c.hidden_size;
  cpu::RmsNorm(rows.data(), weights_.norm.data(), n, c.hidden_size, c.rms_norm_eps, rows.data());
  logits->resize(n * target_.vocab_size);
  cpu::MatMul(weights_.lm_head, rows.data(), n, logits->data(), threads_);
  return absl::OkStatus();
}

absl::Status DFlashDrafter::WriteContext(std::span<const ContextChunk> chunks,
                                         const std::function<void(int layer)>& on_layer) {
  const int64_t width = static_cast<int64_t>(config_.target_layer_ids.size()) * target_.hidden_size;
  std::vector<float> features;
  Scratch s;
  for (const ContextChunk& c : chunks) {
    const int64_t count = static_cast<int64_t>(c.features.size()) / width;
    if (c.kv == nullptr || count * width != static_cast<int64_t>(c.features.size()) ||
        c.first < 0 ||
        static_cast<int64_t>(c.kv->blocks.size()) * pool_.block_size() < c.first + count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dflash drafter: a context chunk at position ", c.first, " has ", c.features.size(),
          " feature values (rows of ", width, ") or too few blocks for them"));
    }
    const size_t base = features.size();
    features.insert(features.end(), c.features.begin(), c.features.end());
    NormalizeFeatures(features.data() + base, static_cast<int>(count));
    for (int p = c.first; p < c.first + count; ++p) s.ctx_pos.push_back({c.kv, p});
  }
  ProjectFeatures(features.data(), static_cast<int64_t>(s.ctx_pos.size()), s);
  s.k.resize(s.ctx_rows * config_.layers.kv_dim());
  s.v.resize(s.ctx_rows * config_.layers.kv_dim());
  for (int layer = 0; layer < config_.layers.num_layers; ++layer) {
    WriteKv(layer, s.ctx.data(), s.ctx_rows, s.ctx_pos, s);
    if (on_layer) on_layer(layer);
  }
  for (const ContextChunk& c : chunks) {
    const int end = c.first + static_cast<int>(c.features.size() / width);
    c.kv->num_tokens = std::max(c.kv->num_tokens, end);
  }
  return absl::OkStatus();
}

absl::Status DFlashDrafter::BeginWithContext(
    uint64_t sequence, int tokens, const std::function<absl::Status(const KvSequence&)>& land) {
  End(sequence);
  KvSequence kv;
  if (tokens < 0 || tokens > context_limit_ || !pool_.can_extend(kv, tokens)) {
    return absl::ResourceExhaustedError(absl::StrCat("dflash drafter: no room for a context of ",
                                                     tokens, " tokens in its KV pool"));
  }
  pool_.extend(kv, tokens);
  const absl::Status landed = land(kv);
  if (!landed.ok()) {
    pool_.release(kv);
    return landed;
  }
  kv.num_tokens = tokens;
  states_[sequence].kv = std::move(kv);
  return absl::OkStatus();
}

}  // namespace dq
