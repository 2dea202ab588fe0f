#include "engine/cuda/cuda_model.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cuda/attention_decode.h"
#include "engine/cuda/attention_prefill.h"
#include "engine/cuda/attention_prefill_fp8.h"
#include "engine/cuda/cuda_model_internal.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/linear_fuse.h"
#include "engine/cuda/norm.h"
#include "engine/cuda/rope.h"
#include "engine/cuda/weight_stream.h"
#include "engine/quant/ggml_blocks.h"

namespace dq::cuda {

namespace {

constexpr int kMaxSeqs = 256;
constexpr int kMaxLogitRows = 512;

DeviceBuffer Floats(const std::vector<float>& v) { return DeviceBuffer::From(v); }

// Rounds to bf16 (nearest even) on the host.
uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// The embedding table dequantized to bf16, uploaded in slices of rows.
absl::StatusOr<DeviceBuffer> UploadEmbedding(const LinearWeight& e) {
  if (e.codec != nullptr) {
    return absl::UnimplementedError("quantized-codec embeddings are not supported on CUDA");
  }
  DeviceBuffer out(static_cast<size_t>(e.out_features * e.in_features) * 2);
  constexpr int64_t kSlice = 4096;
  std::vector<float> row(e.in_features);
  std::vector<uint16_t> host;
  for (int64_t r0 = 0; r0 < e.out_features; r0 += kSlice) {
    const int64_t n = std::min(kSlice, e.out_features - r0);
    host.resize(n * e.in_features);
    for (int64_t r = 0; r < n; ++r) {
      DequantizeRow(e.dtype, e.row(r0 + r), row.data(), e.in_features);
      for (int64_t i = 0; i < e.in_features; ++i) host[r * e.in_features + i] = Bf16Bits(row[i]);
    }
    CUDA_CHECK(cudaMemcpy(out.get<uint16_t>() + r0 * e.in_features, host.data(), host.size() * 2,
                          cudaMemcpyHostToDevice));
  }
  return out;
}

// Uploads matrices that share an input as one fused matrix when their storage allows, else
// one by one (the forward pass handles both layouts).
absl::StatusOr<std::vector<DeviceLinear>> UploadGroup(std::vector<const LinearWeight*> parts,
                                                      const KernelOptions& kernels) {
  std::vector<DeviceLinear> out;
  absl::StatusOr<LinearWeight> fused = ConcatRows(parts);
  if (fused.ok()) {
    absl::StatusOr<DeviceLinear> d = UploadLinear(*fused, kernels);
    if (d.ok()) {
      out.push_back(std::move(*d));
      return out;
    }
  }
  for (const LinearWeight* p : parts) {
    DQ_ASSIGN_OR_RETURN(DeviceLinear d, UploadLinear(*p, kernels));
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

DeviceKvCache::DeviceKvCache(const KvCacheOptions& kv)
    : kv_(kv),
      layout_(KvTensorLayout::Paged(kv.num_layers, kv.num_blocks, kv.block_size, kv.num_kv_heads,
                                    kv.head_dim, sizeof(__nv_bfloat16))) {
  const size_t per_tensor = layout_.tensor_bytes();
  k_ = DeviceBuffer(per_tensor);
  v_ = DeviceBuffer(per_tensor);
  CUDA_CHECK(cudaMemset(k_.get(), 0, per_tensor));
  CUDA_CHECK(cudaMemset(v_.get(), 0, per_tensor));
}

KvCacheLayer DeviceKvCache::layer(int l) const {
  KvCacheLayer c;
  c.k = reinterpret_cast<__nv_bfloat16*>(k_.get<char>() + layout_.offset(l, 0));
  c.v = reinterpret_cast<__nv_bfloat16*>(v_.get<char>() + layout_.offset(l, 0));
  c.num_blocks = kv_.num_blocks;
  c.block_size = kv_.block_size;
  c.num_kv_heads = kv_.num_kv_heads;
  c.head_dim = kv_.head_dim;
  return c;
}

CudaDecoderModel::CudaDecoderModel() = default;

CudaDecoderModel::~CudaDecoderModel() {
  for (auto& [b, g] : graphs_) cudaGraphExecDestroy(g);
  streamer_.reset();  // its copies must finish before the stream and slots go
}

namespace {

absl::StatusOr<DeviceAttention> UploadAttention(const AttentionBlock& a,
                                                const KernelOptions& kernels) {
  DeviceAttention d;
  d.norm = Floats(a.norm);
  if (a.has_qk_norm()) {
    d.q_norm = Floats(a.q_norm);
    d.k_norm = Floats(a.k_norm);
  }
  DQ_ASSIGN_OR_RETURN(d.qkv, UploadGroup({&a.q, &a.k, &a.v}, kernels));
  DQ_ASSIGN_OR_RETURN(d.o, UploadLinear(a.o, kernels));
  d.kv_layer = a.kv_layer;
  return d;
}

absl::StatusOr<DeviceMlp> UploadMlp(const MlpBlock& m, const KernelOptions& kernels) {
  DeviceMlp d;
  d.norm = Floats(m.norm);
  DQ_ASSIGN_OR_RETURN(d.gate_up, UploadGroup({&m.gate, &m.up}, kernels));
  DQ_ASSIGN_OR_RETURN(d.down, UploadLinear(m.down, kernels));
  return d;
}

absl::StatusOr<CudaDecoderModel::Layer> UploadLayer(const ProgramLayer& pl,
                                                    const KernelOptions& kernels) {
  CudaDecoderModel::Layer l;
  for (const Block& b : pl.blocks) {
    if (const auto* a = std::get_if<AttentionBlock>(&b)) {
      DQ_ASSIGN_OR_RETURN(DeviceAttention d, UploadAttention(*a, kernels));
      l.blocks.emplace_back(std::move(d));
    } else {
      DQ_ASSIGN_OR_RETURN(DeviceMlp d, UploadMlp(std::get<MlpBlock>(b), kernels));
      l.blocks.emplace_back(std::move(d));
    }
  }
  return l;
}

// Each device linear of the layer (a fused qkv or gate|up counts once).
template <typename Fn>
void ForEachDeviceLinear(const CudaDecoderModel::Layer& l, Fn&& fn) {
  for (const DeviceBlock& b : l.blocks) {
    if (const auto* a = std::get_if<DeviceAttention>(&b)) {
      for (const DeviceLinear& d : a->qkv) fn(d);
      fn(a->o);
    } else {
      const DeviceMlp& m = std::get<DeviceMlp>(b);
      for (const DeviceLinear& d : m.gate_up) fn(d);
      fn(m.down);
    }
  }
}

int64_t LayerBytes(const CudaDecoderModel::Layer& l) {
  int64_t n = 0;
  ForEachDeviceLinear(l, [&](const DeviceLinear& d) { n += d.device_bytes(); });
  return n;
}

// Adds the layer's linears to `stats`; `fp8_linears` counts those computing W8A8 in e4m3.
void CountLinears(const CudaDecoderModel::Layer& l, CudaModelStats& stats, int& fp8_linears) {
  ForEachDeviceLinear(l, [&](const DeviceLinear& d) {
    ++stats.layer_linears;
    stats.act_quantized_linears += QuantizesActivations(d.kind);
    fp8_linears += d.kind == LinearKind::kFp8;
  });
  for (const DeviceBlock& b : l.blocks) {
    if (const auto* a = std::get_if<DeviceAttention>(&b))
      stats.fused_qkv_layers += a->qkv.size() == 1;
    if (const auto* m = std::get_if<DeviceMlp>(&b))
      stats.fused_gate_up_layers += m->gate_up.size() == 1;
  }
}

}  // namespace

absl::Status CudaDecoderModel::Upload(const DecoderModel& cpu,
                                      const CudaWeightPlacement& placement) {
  const ModelProgram& w = cpu.program();
  DQ_RETURN_IF_ERROR(w.RequireLlamaBlocks("CUDA"));
  int fp8_linears = 0;
  if (placement.stream != nullptr) {
    DQ_ASSIGN_OR_RETURN(streamer_, WeightStreamer::Create(*placement.stream));
  }
  for (const ProgramLayer& pl : w.layers) {
    // Streamed: each layer is uploaded as the resident model would hold it, its image kept by
    // the streamer, and its device memory freed before the next one.
    DQ_ASSIGN_OR_RETURN(Layer l, UploadLayer(pl, options_.kernels));
    CountLinears(l, stats_, fp8_linears);
    if (streamer_) {
      DQ_RETURN_IF_ERROR(streamer_->AddLayer(l));
    } else {
      stats_.weight_bytes += LayerBytes(l);
      layers_.push_back(std::move(l));
    }
  }
  if (streamer_) {
    DQ_RETURN_IF_ERROR(streamer_->Finish());
    stats_.streamed_image_bytes = streamer_->image_bytes();
    stats_.stream_slot_bytes = streamer_->slot_bytes() * streamer_->slots();
    stats_.weight_bytes += stats_.stream_slot_bytes;
  }
  if (placement.share_embeddings) {
    const CudaDecoderModel& o = *placement.share_embeddings;
    embeddings_owner_ = placement.share_embeddings;
    embedding_ = DeviceBuffer::View(o.embedding_.get(), o.embedding_.bytes());
    lm_head_ = ViewLinear(o.lm_head_);
    stats_.shared_weight_bytes = embedding_.bytes() + lm_head_.device_bytes();
  } else {
    DQ_ASSIGN_OR_RETURN(embedding_, UploadEmbedding(w.embedding));
    DQ_ASSIGN_OR_RETURN(lm_head_, UploadLinear(w.lm_head, options_.kernels));
    stats_.weight_bytes += embedding_.bytes() + lm_head_.device_bytes();
  }
  // FP8 attention goes with FP8 linears: every layer linear W8A8 in e4m3.
  stats_.fp8_attention = options_.fp8_attention && stats_.layer_linears > 0 &&
                         fp8_linears == stats_.layer_linears &&
                         PrefillAttentionFp8Supported(kv_->layer(0));
  final_norm_ = Floats(w.final_norm);
  inv_freq_ = Floats(cpu::RopeInverseFrequencies(config_.head_dim, config_.rope_theta));
  stats_.kv_cache_bytes = kv_->bytes();
  return absl::OkStatus();
}

void CudaDecoderModel::AllocateWorkspace() {
  const ModelConfig& c = config_;
  mu_ = std::make_shared<std::mutex>();
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_owner_ = std::shared_ptr<CUstream_st>(s, [](cudaStream_t x) { cudaStreamDestroy(x); });
  stream_ = s;
  linear_ = std::make_shared<LinearContext>();
  linear_->SetOptions(options_.kernels);
  const int64_t max_in = std::max<int64_t>(c.intermediate_size, std::max(c.hidden_size, c.q_dim()));
  const int64_t max_out = std::max<int64_t>(2 * c.intermediate_size, c.q_dim() + 2 * c.kv_dim());
  linear_->Reserve(options_.max_batch_tokens, max_in, max_out);
  auto& b = *(buf_ = std::make_shared<Buffers>());
  b.cap_tokens = options_.max_batch_tokens;
  b.cap_seqs = kMaxSeqs;
  b.cap_rows = kMaxLogitRows;
  b.max_blocks = (c.max_context + kv_->options().block_size - 1) / kv_->options().block_size;
  b.ids = 0;
  b.positions = b.cap_tokens;
  b.slots = 2 * b.cap_tokens;
  b.cu_seqlens = 3 * b.cap_tokens;
  b.prefix = b.cu_seqlens + b.cap_seqs + 1;
  b.ctx = b.prefix + b.cap_seqs;
  b.cu_q_tiles = b.ctx + b.cap_seqs;
  b.cu_key_tiles = b.cu_q_tiles + b.cap_seqs + 1;
  b.tables = b.cu_key_tiles + b.cap_seqs + 1;
  b.meta_ints = b.tables + b.cap_seqs * b.max_blocks;
  b.meta = DeviceBuffer(b.meta_ints * 4);
  CUDA_CHECK(cudaMallocHost(&b.host_meta, b.meta_ints * 4));
  CUDA_CHECK(cudaMallocHost(&b.host_logits,
                            static_cast<size_t>(options_.max_graph_batch) * c.vocab_size * 4));
  const int64_t T = b.cap_tokens;
  b.x = DeviceBuffer(T * c.hidden_size * 4);
  b.h = DeviceBuffer(T * std::max<int64_t>(c.hidden_size, c.intermediate_size) * 2);
  b.qkv = DeviceBuffer(T * (c.q_dim() + 2 * c.kv_dim()) * 2);
  b.attn = DeviceBuffer(T * c.q_dim() * 2);
  b.gu = DeviceBuffer(T * 2 * c.intermediate_size * 2);
  b.rows = DeviceBuffer(b.cap_rows * c.hidden_size * 4);
  b.rows_h = DeviceBuffer(b.cap_rows * c.hidden_size * 2);
  b.logits = DeviceBuffer(b.cap_rows * static_cast<int64_t>(c.vocab_size) * 4);
  b.decode_ws = DeviceBuffer(DecodeAttentionWorkspaceBytes(
      std::max(options_.max_graph_batch, kMaxDecodeSeqs), c.num_heads, c.head_dim, c.max_context));
}

void CudaDecoderModel::AllocateFp8AttentionWorkspace() {
  Buffers& b = *buf_;
  if (!stats_.fp8_attention || b.fp8_attn_ws.bytes() > 0) return;
  const ModelConfig& c = config_;
  // One prompt of a full pass, or a chunk over a cached prefix up to the context, plus a
  // tile of rounding for each of a few sequences.
  constexpr int kSlack = 16;
  b.fp8_q_tile_cap = static_cast<int>(b.cap_tokens / kFp8AttentionTile) + kSlack;
  b.fp8_key_tile_cap =
      static_cast<int>(std::max<int64_t>(b.cap_tokens, c.max_context) / kFp8AttentionTile) + kSlack;
  b.fp8_seq_cap = kSlack;
  b.fp8_attn_ws = DeviceBuffer(PrefillAttentionFp8WorkspaceBytes(
      b.fp8_q_tile_cap, b.fp8_key_tile_cap, b.fp8_seq_cap, c.num_heads, c.num_kv_heads));
  spdlog::info("cuda model: FP8 prefill attention, {:.1f} MiB of workspace",
               b.fp8_attn_ws.bytes() / 1048576.0);
}

absl::Status CudaDecoderModel::ShareWorkspace(const CudaDecoderModel& peer) {
  if (options_.max_batch_tokens > peer.buf_->cap_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a model sharing another's scratch cannot take larger passes (", options_.max_batch_tokens,
        " tokens) than it was sized for (", peer.buf_->cap_tokens, ")"));
  }
  if (peer.config_.hidden_size != config_.hidden_size ||
      peer.config_.intermediate_size != config_.intermediate_size ||
      peer.config_.q_dim() != config_.q_dim() || peer.config_.kv_dim() != config_.kv_dim() ||
      peer.config_.vocab_size != config_.vocab_size ||
      peer.config_.max_context != config_.max_context) {
    return absl::InvalidArgumentError("models sharing scratch buffers must have the same shapes");
  }
  mu_ = peer.mu_;
  stream_owner_ = peer.stream_owner_;
  stream_ = peer.stream_;
  linear_ = peer.linear_;
  buf_ = peer.buf_;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaDecoderModel>> CudaDecoderModel::Create(
    const DecoderModel& cpu, std::shared_ptr<DeviceKvCache> kv, const CudaBackendOptions& options,
    const CudaWeightPlacement& placement) {
  const ModelConfig& cc = cpu.config();
  // What the attention kernels are built for; anything else is refused here, not asserted later.
  if (cc.head_dim != 64 && cc.head_dim != 128) {
    return absl::UnimplementedError(absl::StrCat("the CUDA backend supports head_dim 64 or 128, ",
                                                 "this model has ", cc.head_dim,
                                                 "; run it with --device cpu"));
  }
  if (cc.num_heads % cc.num_kv_heads != 0 || cc.num_heads / cc.num_kv_heads > 8 ||
      cc.hidden_size % 8 != 0) {
    return absl::UnimplementedError(absl::StrCat(
        "the CUDA backend needs a GQA group of at most 8 query heads per KV head and a hidden ",
        "size divisible by 8 (this model: ", cc.num_heads, " / ", cc.num_kv_heads,
        " heads, hidden ", cc.hidden_size, ")"));
  }
  DQ_RETURN_IF_ERROR(ValidateKernelOptions(options.kernels));
  CUDA_CHECK(cudaSetDevice(options.device));
  std::unique_ptr<CudaDecoderModel> m(new CudaDecoderModel());
  m->config_ = cpu.config();
  m->options_ = options;
  // A graph would bake in one pass's slot waits and skip the host's reads: streamed passes run
  // uncaptured.
  if (placement.stream != nullptr) m->options_.use_graphs = false;
  m->kv_ = std::move(kv);
  DQ_RETURN_IF_ERROR(m->Upload(cpu, placement));
  if (placement.share_workspace) {
    DQ_RETURN_IF_ERROR(m->ShareWorkspace(*placement.share_workspace));
  } else {
    m->AllocateWorkspace();
  }
  m->AllocateFp8AttentionWorkspace();
  spdlog::info(
      "cuda model: {:.1f} MiB of weights, {:.1f} MiB of KV cache, fused qkv in {}/{} "
      "layers, gate|up in {}/{}, activations quantized in {}/{} layer linears; kernels {}",
      m->stats_.weight_bytes / 1048576.0, m->stats_.kv_cache_bytes / 1048576.0,
      m->stats_.fused_qkv_layers, cc.num_layers, m->stats_.fused_gate_up_layers, cc.num_layers,
      m->stats_.act_quantized_linears, m->stats_.layer_linears,
      KernelOptionsToString(options.kernels));
  if (m->streamer_) {
    spdlog::info(
        "cuda model: layers streamed ({:.1f} MiB per pass) through {} slots of {:.1f} MiB; "
        "embedding/lm_head {}",
        m->stats_.streamed_image_bytes / 1048576.0, m->streamer_->slots(),
        m->streamer_->slot_bytes() / 1048576.0,
        placement.share_embeddings ? "shared with the resident model" : "resident");
  }
  return m;
}

}  // namespace dq::cuda
