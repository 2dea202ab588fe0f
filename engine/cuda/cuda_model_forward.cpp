// CudaDecoderModel's forward pass: planning on the host, enqueueing the layers, logits, and the
// decode step's CUDA graphs.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/cuda/attention_decode.h"
#include "engine/cuda/attention_prefill.h"
#include "engine/cuda/attention_prefill_fp8.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/cuda_model_internal.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/norm.h"
#include "engine/cuda/rope.h"
#include "engine/cuda/weight_stream.h"

namespace dq::cuda {
namespace {

absl::Status CheckBatch(const Batch& batch, const KvBlockPool& pool, const ModelConfig& c,
                        int64_t cap_tokens, int cap_seqs) {
  if (batch.items.empty()) return absl::InvalidArgumentError("empty batch");
  if (batch.num_tokens() > cap_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch of ", batch.num_tokens(), " tokens exceeds the CUDA backend's max_batch_tokens (",
        cap_tokens, "); split the prompt into chunks"));
  }
  if (static_cast<int>(batch.items.size()) > cap_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", cap_seqs, " sequences in a batch"));
  }
  for (const BatchItem& it : batch.items) {
    const int64_t end = it.kv->num_tokens + static_cast<int64_t>(it.tokens.size());
    if (it.tokens.empty()) return absl::InvalidArgumentError("a batch item has no tokens");
    if (end > c.max_context) {
      return absl::InvalidArgumentError(
          absl::StrCat("position ", end - 1, " is beyond the context (", c.max_context, ")"));
    }
    if (static_cast<int64_t>(it.kv->blocks.size()) * pool.block_size() < end) {
      return absl::FailedPreconditionError("a sequence has no KV blocks for its new tokens");
    }
    for (int32_t t : it.tokens) {
      if (t < 0 || t >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", t, " is not in [0, ", c.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

// Whether `batch` runs as one decode row per token (Plan::row_split): a decode-phase batch with
// some multi-token item, every multi-token item wanting all its logits (rows then map one to one
// onto logits), and few enough tokens for the decode kernels.
bool RowSplit(const Batch& batch) {
  if (batch.phase != Phase::kDecode || batch.num_tokens() > kMaxDecodeSeqs) return false;
  bool multi = false;
  for (const BatchItem& it : batch.items) {
    if (it.tokens.size() > 1 && !it.all_logits) return false;
    multi = multi || it.tokens.size() > 1;
  }
  return multi;
}

}  // namespace

absl::Status CudaDecoderModel::Prepare(const Batch& batch, const KvBlockPool& pool,
                                       Plan* plan) const {
  Buffers& b = *buf_;
  DQ_RETURN_IF_ERROR(CheckBatch(batch, pool, config_, b.cap_tokens, static_cast<int>(b.cap_seqs)));
  const int bs = pool.block_size();
  plan->tokens = batch.num_tokens();
  plan->row_split = RowSplit(batch);
  // Attention's sequences: the items, or with row_split one per token.
  plan->seqs =
      plan->row_split ? static_cast<int>(plan->tokens) : static_cast<int>(batch.items.size());
  plan->decode = true;
  int32_t* m = b.host_meta;
  std::fill(m + b.tables, m + b.tables + plan->seqs * b.max_blocks, 0);
  int64_t t = 0;
  int row = 0;  // attention sequence
  m[b.cu_seqlens] = 0;
  // Attention sequence `row` ends before token `end` and sees positions [0, ctx).
  auto close_row = [&](const BatchItem& it, int64_t end, int ctx) {
    const int64_t begin = m[b.cu_seqlens + row];
    m[b.cu_seqlens + row + 1] = static_cast<int32_t>(end);
    m[b.prefix + row] = ctx - static_cast<int>(end - begin);
    m[b.ctx + row] = ctx;
    const int nb = std::min<int>(static_cast<int>(it.kv->blocks.size()), b.max_blocks);
    std::copy_n(it.kv->blocks.begin(), nb, m + b.tables + row * b.max_blocks);
    ++row;
  };
  for (const BatchItem& it : batch.items) {
    const int n0 = it.kv->num_tokens, n = static_cast<int>(it.tokens.size());
    // A one-token item is a decode row whether or not it asks for "all" logits (it has one
    // row): a speculative step in which nothing was drafted computes exactly a plain step.
    plan->decode = plan->decode && (plan->row_split || n == 1) && plan->seqs <= kMaxDecodeSeqs;
    plan->max_q_len = std::max(plan->max_q_len, plan->row_split ? 1 : n);
    plan->logit_rows.push_back({it.all_logits ? t : t + n - 1, it.all_logits ? n : 1});
    plan->num_logit_rows += plan->logit_rows.back().second;
    for (int j = 0; j < n; ++j, ++t) {
      const int pos = n0 + j;
      m[b.ids + t] = it.tokens[j];
      m[b.positions + t] = pos;
      m[b.slots + t] = it.kv->blocks[pos / bs] * bs + pos % bs;
      if (plan->row_split) close_row(it, t + 1, pos + 1);
    }
    if (!plan->row_split) close_row(it, t, n0 + n);
  }
  if (!plan->decode && stats_.fp8_attention) PlanFp8Attention(plan);
  // Only the used part of each array travels (the block tables' region is large).
  auto upload = [&](int64_t off, int64_t n) {
    CUDA_CHECK(cudaMemcpyAsync(b.dev(off), m + off, n * 4, cudaMemcpyHostToDevice, stream_));
  };
  upload(b.ids, plan->tokens);
  upload(b.positions, plan->tokens);
  upload(b.slots, plan->tokens);
  upload(b.cu_seqlens, b.tables - b.cu_seqlens);  // cu_seqlens, prefix, ctx: a few KiB
  upload(b.tables, plan->seqs * b.max_blocks);
  return absl::OkStatus();
}

void CudaDecoderModel::PlanFp8Attention(Plan* plan) const {
  const Buffers& b = *buf_;
  int32_t* m = b.host_meta;
  std::vector<int32_t> fresh(plan->seqs), ctx(plan->seqs);
  for (int r = 0; r < plan->seqs; ++r) {
    fresh[r] = m[b.cu_seqlens + r + 1] - m[b.cu_seqlens + r];
    ctx[r] = m[b.ctx + r];
  }
  PrefillAttentionFp8Args f;
  PlanFp8AttentionTiles(fresh.data(), ctx.data(), plan->seqs, m + b.cu_q_tiles, m + b.cu_key_tiles,
                        &f);
  plan->fp8_q_tiles = f.total_q_tiles;
  plan->fp8_key_tiles = f.total_key_tiles;
  plan->fp8_max_key_tiles = f.max_key_tiles;
  // A batch beyond the workspace (many sequences, long cached prefixes) takes bf16 attention.
  plan->fp8_attention = plan->seqs <= b.fp8_seq_cap && f.total_q_tiles <= b.fp8_q_tile_cap &&
                        f.total_key_tiles <= b.fp8_key_tile_cap;
}

float* CudaDecoderModel::TapBuffer(const Plan& plan, const TapSet& taps, bool graph) const {
  if (taps.empty()) return nullptr;
  Buffers& b = *buf_;
  const int64_t hidden = config_.hidden_size;
  if (graph) {
    // Fixed: a captured graph keeps the address it copied to.
    if (b.graph_taps == nullptr) {
      const size_t floats = size_t(config_.num_layers) * options_.max_graph_batch * hidden;
      CUDA_CHECK(cudaMallocHost(&b.graph_taps, floats * 4));
    }
    return b.graph_taps;
  }
  const int64_t need = static_cast<int64_t>(taps.layers().size()) * plan.tokens * hidden;
  if (need > b.host_taps_floats) {
    if (b.host_taps != nullptr) CUDA_CHECK(cudaFreeHost(b.host_taps));
    CUDA_CHECK(cudaMallocHost(&b.host_taps, need * 4));
    b.host_taps_floats = need;
  }
  return b.host_taps;
}

absl::StatusOr<bool> CudaDecoderModel::Launch(const Plan& plan, const ForwardHooks& hooks,
                                              float* host_out, const TapSet& taps,
                                              float** taps_out) const {
  const bool graph = plan.decode && options_.use_graphs && plan.seqs <= options_.max_graph_batch;
  const TapTarget tap{&taps, TapBuffer(plan, taps, graph)};
  *taps_out = tap.out;
  const bool persistent = PreparePersistentDecode(plan, tap);
  if (graph) {
    RunDecodeGraph(plan, tap, persistent);
    return true;
  }
  if (persistent) {
    EnqueuePersistentStep(plan);
    if (host_out != nullptr) {
      CUDA_CHECK(cudaMemcpyAsync(host_out, buf_->logits.get(),
                                 plan.tokens * int64_t{config_.vocab_size} * 4,
                                 cudaMemcpyDeviceToHost, stream_));
    }
    return false;
  }
  absl::Status s = EnqueueLayers(plan, &hooks, tap);
  if (!s.ok()) {
    // A streamed layer could not be read: drain what was enqueued so that nothing of this pass
    // runs on after the error (the next pass starts with idle streams and slots).
    if (streamer_) streamer_->Abort();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return s;
  }
  EnqueueLogits(plan, host_out);
  return false;
}

void CudaDecoderModel::DeliverTaps(const Plan& plan, const TapSet& taps, const float* out,
                                   const ForwardHooks& hooks) const {
  const int64_t rows = plan.tokens * config_.hidden_size;
  for (size_t i = 0; i < taps.layers().size(); ++i) {
    hooks.on_layer_output(taps.layers()[i], std::span<const float>(out + i * rows, rows));
  }
}

absl::Status CudaDecoderModel::Forward(const Batch& batch, KvBlockPool& pool, ThreadPool&,
                                       BatchLogits* logits, const ForwardHooks& hooks) const {
  std::lock_guard lock(*mu_);
  Buffers& b = *buf_;
  Plan plan;
  DQ_RETURN_IF_ERROR(Prepare(batch, pool, &plan));
  logits->vocab = config_.vocab_size;
  logits->values.resize(plan.num_logit_rows * static_cast<int64_t>(config_.vocab_size));
  logits->item_first_row.clear();
  int64_t row = 0;
  for (const auto& r : plan.logit_rows) {
    logits->item_first_row.push_back(row);
    row += r.second;
  }
  const TapSet taps(hooks, config_.num_layers);
  float* taps_out = nullptr;
  DQ_ASSIGN_OR_RETURN(const bool graph,
                      Launch(plan, hooks, logits->values.data(), taps, &taps_out));
  if (graph) {
    // Through pinned memory: a device-to-pageable copy is staged by the driver, much slower.
    CUDA_CHECK(cudaMemcpyAsync(b.host_logits, b.logits.get(), logits->values.size() * 4,
                               cudaMemcpyDeviceToHost, stream_));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (graph) std::memcpy(logits->values.data(), b.host_logits, logits->values.size() * 4);
  for (const BatchItem& it : batch.items) it.kv->num_tokens += static_cast<int>(it.tokens.size());
  DeliverTaps(plan, taps, taps_out, hooks);
  return absl::OkStatus();
}

absl::Status CudaDecoderModel::EnqueueLayers(const Plan& plan, const ForwardHooks* hooks,
                                             const TapTarget& taps) const {
  const Buffers& b = *buf_;
  if (streamer_) DQ_RETURN_IF_ERROR(streamer_->Begin(stream_));
  EmbeddingForward({embedding_.get<__nv_bfloat16>(), b.dev(b.ids), b.x.get<float>(), plan.tokens,
                    config_.hidden_size},
                   stream_);
  const int64_t rows = plan.tokens * config_.hidden_size;
  for (int l = 0; l < config_.num_layers; ++l) {
    if (!streamer_) {
      EnqueueLayer(layers_[l], plan, hooks);
    } else {
      // The compute stream waits for the layer's slot; after its kernels the slot is refilled.
      EnqueueLayer(streamer_->Acquire(l), plan, hooks);
      DQ_RETURN_IF_ERROR(streamer_->Release(l));
    }
    const int slot = taps.taps != nullptr ? taps.taps->slot(l) : -1;
    if (slot >= 0) {
      CUDA_CHECK(cudaMemcpyAsync(taps.out + slot * rows, b.x.get<float>(), rows * 4,
                                 cudaMemcpyDeviceToHost, stream_));
    }
  }
  return absl::OkStatus();
}

bool CudaDecoderModel::RowInvariant(const DeviceLinear& w, const Plan& plan) const {
  // Verification rows computed as decode steps compute them (Plan::row_split): weight-only
  // linears at any m (decode steps take the same GEMV kernels up to 8 sequences). bf16 decode
  // steps use the GEMV for one sequence only (cuBLASLt from 2 on, which no row split can
  // reproduce): GEMV rows for a single sequence's verification, or for up to 8 rows.
  if (plan.decode && options_.batch_invariant) return true;
  const bool one_item = plan.logit_rows.size() == 1;
  return plan.row_split && (w.kind == LinearKind::kWeightOnly || one_item || plan.tokens <= 8);
}

void CudaDecoderModel::EnqueueLayer(const Layer& L, const Plan& plan,
                                    const ForwardHooks* hooks) const {
  for (const DeviceBlock& block : L.blocks) {
    if (const auto* a = std::get_if<DeviceAttention>(&block)) {
      EnqueueAttention(*a, plan, hooks);
    } else {
      EnqueueMlp(std::get<DeviceMlp>(block), plan);
    }
  }
}

void CudaDecoderModel::EnqueueAttention(const DeviceAttention& A, const Plan& plan,
                                        const ForwardHooks* hooks) const {
  const ModelConfig& c = config_;
  const Buffers& b = *buf_;
  const int64_t T = plan.tokens;
  auto* h = b.h.get<__nv_bfloat16>();
  auto* qkv = b.qkv.get<__nv_bfloat16>();
  const KvCacheLayer cache = kv_->layer(A.kv_layer);
  RmsNormForward({b.x.get<float>(), nullptr, nullptr, nullptr, A.norm.get<float>(), h, T,
                  c.hidden_size, c.rms_norm_eps},
                 stream_);
  // Fused: one [T, q|k|v] output. Separate: q, k, v each dense, one after another.
  const bool fused = A.qkv.size() == 1;
  const int64_t qkv_w = c.q_dim() + 2 * c.kv_dim();
  __nv_bfloat16* q = qkv;
  __nv_bfloat16* k = fused ? qkv + c.q_dim() : qkv + T * c.q_dim();
  __nv_bfloat16* v = fused ? k + c.kv_dim() : k + T * c.kv_dim();
  __nv_bfloat16* outs[3] = {q, k, v};
  for (size_t i = 0; i < A.qkv.size(); ++i) {
    LinearForward(A.qkv[i], {h, T, outs[i], nullptr, RowInvariant(A.qkv[i], plan)}, *linear_,
                  stream_);
  }
  QkNormRopeArgs r;
  r.q = q;
  r.k = k;
  r.v = v;
  r.q_stride = fused ? qkv_w : c.q_dim();
  r.k_stride = r.v_stride = fused ? qkv_w : c.kv_dim();
  r.q_norm_weight = A.q_norm.bytes() > 0 ? A.q_norm.get<float>() : nullptr;
  r.k_norm_weight = A.k_norm.bytes() > 0 ? A.k_norm.get<float>() : nullptr;
  r.positions = b.dev(b.positions);
  r.inv_freq = inv_freq_.get<float>();
  r.slot_mapping = b.dev(b.slots);
  r.tokens = T;
  r.num_heads = c.num_heads;
  r.num_kv_heads = c.num_kv_heads;
  r.head_dim = c.head_dim;
  r.eps = c.rms_norm_eps;
  r.style = c.rope_style;
  QkNormRopeForward(r, cache, stream_);
  if (hooks && hooks->on_layer_kv_written) hooks->on_layer_kv_written(A.kv_layer);
  auto* attn = b.attn.get<__nv_bfloat16>();
  EnqueueAttentionCore(plan, q, r.q_stride, attn, cache);
  LinearForward(A.o, {attn, T, nullptr, b.x.get<float>(), RowInvariant(A.o, plan)}, *linear_,
                stream_);
}

void CudaDecoderModel::EnqueueAttentionCore(const Plan& plan, const __nv_bfloat16* q,
                                            int64_t q_stride, __nv_bfloat16* attn,
                                            const KvCacheLayer& cache) const {
  const ModelConfig& c = config_;
  const Buffers& b = *buf_;
  if (plan.decode) {
    DecodeAttentionArgs a;
    a.q = q;
    a.q_stride = q_stride;
    a.out = attn;
    a.block_tables = b.dev(b.tables);
    a.max_blocks_per_seq = b.max_blocks;
    a.context_lens = b.dev(b.ctx);
    a.num_seqs = plan.seqs;
    a.num_heads = c.num_heads;
    a.max_context = c.max_context;
    a.workspace = b.decode_ws.get();
    a.workspace_bytes = b.decode_ws.bytes();
    a.fresh_span = plan.row_split;  // this pass wrote every drafted position, not just the last
    a.fixed_partition = options_.batch_invariant ? kDecodePartition : 0;
    DecodeAttentionForward(a, cache, stream_);
    return;
  }
  PrefillAttentionArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.out = attn;
  a.cu_seqlens = b.dev(b.cu_seqlens);
  a.prefix_lens = b.dev(b.prefix);
  a.block_tables = b.dev(b.tables);
  a.max_blocks_per_seq = b.max_blocks;
  a.num_seqs = plan.seqs;
  a.num_heads = c.num_heads;
  a.max_q_len = plan.max_q_len;
  a.variant = options_.kernels.prefill_attention;
  if (!plan.fp8_attention) {
    PrefillAttentionForward(a, cache, stream_);
    return;
  }
  PrefillAttentionFp8Args f;
  f.attn = a;
  f.cu_q_tiles = b.dev(b.cu_q_tiles);
  f.cu_key_tiles = b.dev(b.cu_key_tiles);
  f.total_q_tiles = plan.fp8_q_tiles;
  f.total_key_tiles = plan.fp8_key_tiles;
  f.max_key_tiles = plan.fp8_max_key_tiles;
  f.workspace = b.fp8_attn_ws.get();
  f.workspace_bytes = b.fp8_attn_ws.bytes();
  PrefillAttentionFp8Forward(f, cache, stream_);
}

void CudaDecoderModel::EnqueueMlp(const DeviceMlp& M, const Plan& plan) const {
  const ModelConfig& c = config_;
  const Buffers& b = *buf_;
  const int64_t T = plan.tokens;
  auto* h = b.h.get<__nv_bfloat16>();
  auto* gu = b.gu.get<__nv_bfloat16>();
  RmsNormForward({b.x.get<float>(), nullptr, nullptr, nullptr, M.norm.get<float>(), h, T,
                  c.hidden_size, c.rms_norm_eps},
                 stream_);
  const bool gu_fused = M.gate_up.size() == 1;
  const int64_t I = c.intermediate_size;
  __nv_bfloat16* gate = gu;
  __nv_bfloat16* up = gu_fused ? gu + I : gu + T * I;
  __nv_bfloat16* gu_outs[2] = {gate, up};
  for (size_t i = 0; i < M.gate_up.size(); ++i) {
    LinearForward(M.gate_up[i], {h, T, gu_outs[i], nullptr, RowInvariant(M.gate_up[i], plan)},
                  *linear_, stream_);
  }
  const int64_t gu_stride = gu_fused ? 2 * I : I;
  const bool inv = RowInvariant(M.down, plan);
  if (!plan.decode && FusesSwiGlu(M.down)) {
    // FP8 prefill: the SwiGLU is computed inside the down projection's activation quantizer.
    LinearArgs down{nullptr, T, nullptr, b.x.get<float>(), inv};
    down.swiglu = {gate, up, gu_stride};
    LinearForward(M.down, down, *linear_, stream_);
    return;
  }
  SwiGluForward({gate, up, gu_stride, h, T, static_cast<int>(I)}, stream_);
  LinearForward(M.down, {h, T, nullptr, b.x.get<float>(), inv}, *linear_, stream_);
}

void CudaDecoderModel::EnqueueLogits(const Plan& plan, float* host_out) const {
  const ModelConfig& c = config_;
  const Buffers& b = *buf_;
  const int64_t hidden = c.hidden_size, vocab = c.vocab_size;
  // Rows to project, flattened in item order; processed cap_rows at a time.
  std::vector<int64_t> rows;
  for (const auto& [first, n] : plan.logit_rows) {
    for (int64_t i = 0; i < n; ++i) rows.push_back(first + i);
  }
  // The logits of decode steps of up to 8 sequences and of verification rows come from the
  // row-invariant GEMV, so that a verified row equals the decode step's bit for bit.
  // A quantized lm_head ([decode] lm_head) always takes the GEMV: its dequantize + GEMM path
  // would need a bf16 copy of the whole vocabulary matrix as scratch.
  const bool lm_invariant = lm_head_.kind == LinearKind::kWeightOnly || plan.row_split ||
                            (plan.decode && (rows.size() <= 8 || options_.batch_invariant));
  for (size_t at = 0; at < rows.size(); at += b.cap_rows) {
    const int64_t n = std::min<int64_t>(b.cap_rows, static_cast<int64_t>(rows.size() - at));
    // Gather runs of consecutive rows with one copy each.
    for (int64_t i = 0; i < n;) {
      int64_t j = i + 1;
      while (j < n && rows[at + j] == rows[at + j - 1] + 1) ++j;
      CUDA_CHECK(cudaMemcpyAsync(b.rows.get<float>() + i * hidden,
                                 b.x.get<float>() + rows[at + i] * hidden, (j - i) * hidden * 4,
                                 cudaMemcpyDeviceToDevice, stream_));
      i = j;
    }
    RmsNormForward({b.rows.get<float>(), nullptr, nullptr, nullptr, final_norm_.get<float>(),
                    b.rows_h.get<__nv_bfloat16>(), n, c.hidden_size, c.rms_norm_eps},
                   stream_);
    CUDA_CHECK(cudaMemsetAsync(b.logits.get(), 0, n * vocab * 4, stream_));
    LinearForward(lm_head_,
                  {b.rows_h.get<__nv_bfloat16>(), n, nullptr, b.logits.get<float>(), lm_invariant},
                  *linear_, stream_);
    if (host_out != nullptr) {  // null while capturing a graph (the caller copies after)
      CUDA_CHECK(cudaMemcpyAsync(host_out + at * vocab, b.logits.get(), n * vocab * 4,
                                 cudaMemcpyDeviceToHost, stream_));
    }
  }
}

void CudaDecoderModel::RunDecodeGraph(const Plan& plan, const TapTarget& taps,
                                      bool persistent) const {
  const GraphKey key{plan.seqs, plan.row_split,
                     taps.taps ? taps.taps->layers() : std::vector<int>{}};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // The graph bakes in this batch size, the tapped layers and the buffers' addresses; what
    // changes between steps (token ids, positions, slots, block tables, context lengths) is read
    // from `meta`, which the host refreshes before each launch.
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    if (persistent) {
      EnqueuePersistentStep(plan);
    } else {
      // Resident layers only (Create turns graphs off for a streamed model): cannot fail.
      if (!EnqueueLayers(plan, nullptr, taps).ok()) std::abort();
      EnqueueLogits(plan, nullptr);
    }
    CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    it = graphs_.emplace(key, exec).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

BackendFactory CudaBackendFactory(const CudaBackendOptions& options) {
  return [options](const DecoderModel& prefill, const DecoderModel& decode,
                   const KvCacheOptions& kv) -> absl::StatusOr<BackendModels> {
    CUDA_CHECK(cudaSetDevice(options.device));
    auto cache = std::make_shared<DeviceKvCache>(kv);
    BackendModels models;
    DQ_ASSIGN_OR_RETURN(models.decode, CudaDecoderModel::Create(decode, cache, options));
    if (&prefill == &decode) {
      models.prefill = models.decode;
    } else {
      DQ_ASSIGN_OR_RETURN(models.prefill, CudaDecoderModel::Create(prefill, cache, options));
    }
    return models;
  };
}

}  // namespace dq::cuda
