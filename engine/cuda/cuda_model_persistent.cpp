// CudaDecoderModel's persistent decode step (persistent_decode.h): the device image of the
// model's blocks (made once) and one schedule per batch size (made on the first step of that
// size, before any capture), so that a step is the embedding plus one cooperative launch whose
// inputs all sit at fixed addresses (a captured graph replays it with fresh metadata).
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "engine/cuda/attention_decode.h"
#include "engine/cuda/cuda_model.h"
#include "engine/cuda/cuda_model_internal.h"
#include "engine/cuda/elementwise.h"
#include "engine/cuda/persistent_decode.h"
#include "engine/model/decode_schedule.h"

namespace dq::cuda {

// One batch size's schedule on the device.
struct PersistentStep {
  DeviceBuffer tasks, queue, queue_begin, counters;  // counters: stages, then `done`
  DeviceBuffer trace;                                // 3 words per task when traced
  std::vector<DecodeTask> host_tasks;
  std::vector<int> worker_of;  // per task
  int num_counters = 0;
  int ring_bytes = kPdRingBytes[2];
  bool rope_in_attention = false;
  int grid_splits = 1;
  int max_jobs = 0;
  int attn_groups = 1;  // 4-warp attention groups that fit beside the ring (PersistentDecodeParams)
};

struct PersistentDecodeState {
  absl::Status supported;  // of the model (formats, shapes); batch sizes are checked per step
  DeviceBuffer blocks;     // PdBlock per (layer, block), in program order
  std::vector<PdBlock> host_blocks;  // the same, on the host
  std::vector<int> block_base;       // per layer: its first block's index
  ModelProgram shape;                // the program's block kinds (what PlanDecodeStep reads)
  PdLinear lm_head;
  int workers = 0;                      // CTAs of a step: ctas_per_sm on every SM
  int ctas_per_sm = 1;                  // KernelOptions::persistent_ctas_per_sm
  std::map<int, PersistentStep> steps;  // by batch size
  std::set<int> too_large;              // batch sizes left to kernel per op (shared memory)
};

namespace {

absl::StatusOr<PdLinear> ToPd(const DeviceLinear& d, const IntTileOptions& o, const char* what) {
  PdLinear l;
  l.out = d.out_features;
  l.in = d.in_features;
  if (d.kind == LinearKind::kBf16 && d.in_features % 8 == 0) {
    l.data = d.weight.get<uint8_t>();
    return l;
  }
  if (d.kind == LinearKind::kWeightOnly) {
    const WeightOnlyWeights& w = d.weight_only;
    if (w.format == WeightOnlyFormat::kGguf && w.gguf_type == DType::kBF16 && l.in % 8 == 0) {
      l.data = w.packed.get<uint8_t>();  // the same bf16 GEMV as a plain bf16 matrix
      return l;
    }
    if (w.format == WeightOnlyFormat::kInt && PdIntTileLayout(w.bits, w.group_size, l.in)) {
      l.format = w.bits == 4 ? PdFormat::kInt4Tile : PdFormat::kInt2Tile;
      l.data = w.packed.get<uint8_t>();
      l.scales = w.scales.get<uint32_t>();
      for (int g = w.group_size; g > 1; g >>= 1) ++l.group_shift;
      bool tree = false;
      PdIntTileSplit(w.bits, l.out, l.in, o.ctas_per_sm, o.cluster, &l.kw, &tree);
      l.cluster_tree = tree ? 1 : 0;
      return l;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("persistent decode: the ", what,
                   " linear is not bf16 or int4 / int2 in the tiled layout (groups 64 / 128)"));
}

// The model's blocks as the kernel reads them, or why they cannot be.
absl::Status DescribeBlocks(const std::vector<CudaDecoderModel::Layer>& layers,
                            const DeviceKvCache& kv, const IntTileOptions& o,
                            PersistentDecodeState* s, std::vector<PdBlock>* out) {
  for (const CudaDecoderModel::Layer& layer : layers) {
    s->block_base.push_back(static_cast<int>(out->size()));
    ProgramLayer shape;
    for (const DeviceBlock& block : layer.blocks) {
      PdBlock b;
      if (const auto* a = std::get_if<DeviceAttention>(&block)) {
        if (a->qkv.size() != 1) {
          return absl::FailedPreconditionError("persistent decode: q, k, v are not fused");
        }
        b.attention = 1;
        b.norm = a->norm.get<float>();
        b.q_norm = a->q_norm.bytes() > 0 ? a->q_norm.get<float>() : nullptr;
        b.k_norm = a->k_norm.bytes() > 0 ? a->k_norm.get<float>() : nullptr;
        DQ_ASSIGN_OR_RETURN(b.in_proj, ToPd(a->qkv[0], o, "qkv"));
        DQ_ASSIGN_OR_RETURN(b.out_proj, ToPd(a->o, o, "o"));
        const KvCacheLayer cache = kv.layer(a->kv_layer);
        b.k_cache = cache.k;
        b.v_cache = cache.v;
        shape.blocks.emplace_back(AttentionBlock{});
      } else {
        const DeviceMlp& m = std::get<DeviceMlp>(block);
        if (m.gate_up.size() != 1) {
          return absl::FailedPreconditionError("persistent decode: gate and up are not fused");
        }
        b.norm = m.norm.get<float>();
        DQ_ASSIGN_OR_RETURN(b.in_proj, ToPd(m.gate_up[0], o, "gate_up"));
        DQ_ASSIGN_OR_RETURN(b.out_proj, ToPd(m.down, o, "down"));
        shape.blocks.emplace_back(MlpBlock{});
      }
      out->push_back(b);
    }
    s->shape.layers.push_back(std::move(shape));
  }
  return absl::OkStatus();
}

int SmCount() {
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

template <typename T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  return DeviceBuffer::From(std::span<const T>(v));
}

// The model's device image for the kernel, or (in `supported`) why it cannot run it.
std::shared_ptr<PersistentDecodeState> MakeState(const std::vector<CudaDecoderModel::Layer>& layers,
                                                 const DeviceKvCache& kv,
                                                 const DeviceLinear& lm_head, const ModelConfig& c,
                                                 const KernelOptions& k) {
  const IntTileOptions& o = k.int_tile;
  auto state = std::make_shared<PersistentDecodeState>();
  PersistentDecodeState& s = *state;
  std::vector<PdBlock> blocks;
  s.supported = DescribeBlocks(layers, kv, o, &s, &blocks);
  if (s.supported.ok()) {
    absl::StatusOr<PdLinear> lm = ToPd(lm_head, o, "lm_head");
    s.supported = lm.status();
    if (lm.ok()) s.lm_head = *lm;
  }
  if (s.supported.ok() && ((c.head_dim != 64 && c.head_dim != 128) || c.hidden_size % 8 != 0 ||
                           c.intermediate_size % 16 != 0 || c.num_heads % c.num_kv_heads != 0 ||
                           c.num_heads / c.num_kv_heads > 8)) {
    s.supported = absl::FailedPreconditionError(
        "persistent decode: head_dim must be 64 or 128, hidden a multiple of 8, the MLP a "
        "multiple of 16 and at most 8 query heads per KV head");
  }
  if (s.supported.ok()) {
    s.host_blocks = blocks;
    s.blocks = ToDevice(blocks);
    s.ctas_per_sm = k.persistent_ctas_per_sm;
    s.workers = SmCount() * s.ctas_per_sm;
  } else {
    spdlog::info("cuda model: decode runs kernel per op ({})", std::string(s.supported.message()));
  }
  return state;
}

// `sched` flattened for the device (tasks, queues) into `st`, with the partial-sum slots its
// int tile tasks need.
void UploadSchedule(const DecodeSchedule& sched, const PersistentDecodeState& s,
                    PersistentStep* out) {
  PersistentStep& st = *out;
  std::vector<PdTask> tasks;
  for (const DecodeTask& t : sched.tasks) {
    const bool lm = t.kind == DecodeTaskKind::kLmHead;
    tasks.push_back({static_cast<int32_t>(t.kind), lm ? -1 : s.block_base[t.layer] + t.block,
                     static_cast<int32_t>(t.begin), static_cast<int32_t>(t.end), t.wait_counter,
                     t.wait_target, t.signal_counter, static_cast<int32_t>(tasks.size())});
    // Partial-sum slots of an int tile task: its tiles (x2 for gate|up) x warps per tile.
    if (t.kind == DecodeTaskKind::kRopeKv || t.kind == DecodeTaskKind::kAttention) continue;
    const bool in_proj = t.kind == DecodeTaskKind::kQkv || t.kind == DecodeTaskKind::kGateUp;
    const PdBlock* blk = lm ? nullptr : &s.host_blocks[s.block_base[t.layer] + t.block];
    const PdLinear& w = lm ? s.lm_head : (in_proj ? blk->in_proj : blk->out_proj);
    if (w.format == PdFormat::kBf16) continue;
    const int tiles = static_cast<int>((t.end + 15) / 16 - t.begin / 16);
    const int parts = t.kind == DecodeTaskKind::kGateUp ? 2 : 1;
    st.max_jobs = std::max(st.max_jobs, tiles * parts * w.kw);
  }
  std::vector<int32_t> queue, begin{0};
  st.worker_of.assign(sched.tasks.size(), 0);
  for (const std::vector<int>& q : sched.queues) {
    for (int t : q) st.worker_of[t] = static_cast<int>(begin.size()) - 1;
    queue.insert(queue.end(), q.begin(), q.end());
    begin.push_back(static_cast<int32_t>(queue.size()));
  }
  st.host_tasks = sched.tasks;
  st.tasks = ToDevice(tasks);
  st.queue = ToDevice(queue);
  st.queue_begin = ToDevice(begin);
}

}  // namespace

absl::Status CudaDecoderModel::SupportsPersistentDecode(int batch) const {
  std::lock_guard lock(*mu_);
  if (persistent_ == nullptr) {
    return absl::FailedPreconditionError("persistent decode: not built (no such step ran yet)");
  }
  DQ_RETURN_IF_ERROR(persistent_->supported);
  if (batch < 1 || batch > kPdMaxRows) {
    return absl::FailedPreconditionError(
        absl::StrCat("persistent decode: ", batch, " sequences (1 to ", kPdMaxRows, ")"));
  }
  return absl::OkStatus();
}

std::vector<int> CudaDecoderModel::persistent_decode_batches() const {
  std::lock_guard lock(*mu_);
  std::vector<int> out;
  if (persistent_ != nullptr) {
    for (const auto& [rows, step] : persistent_->steps) out.push_back(rows);
  }
  return out;
}

absl::StatusOr<std::vector<CudaDecoderModel::PersistentTaskTime>>
CudaDecoderModel::PersistentDecodeTrace(int batch) const {
  std::lock_guard lock(*mu_);
  const auto it = persistent_ != nullptr ? persistent_->steps.find(batch)
                                         : std::map<int, PersistentStep>::iterator();
  if (persistent_ == nullptr || it == persistent_->steps.end() || it->second.trace.bytes() == 0) {
    return absl::NotFoundError(absl::StrCat("persistent decode: no traced step of ", batch,
                                            " sequences ran (set_persistent_trace first)"));
  }
  const PersistentStep& st = it->second;
  std::vector<unsigned long long> raw(st.host_tasks.size() * 3);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  CUDA_CHECK(cudaMemcpy(raw.data(), st.trace.get(), st.trace.bytes(), cudaMemcpyDeviceToHost));
  std::vector<PersistentTaskTime> out;
  for (size_t i = 0; i < st.host_tasks.size(); ++i) {
    const DecodeTask& t = st.host_tasks[i];
    out.push_back({t.kind, t.layer, t.signal_counter, st.worker_of[i], raw[3 * i], raw[3 * i + 1],
                   raw[3 * i + 2]});
  }
  return out;
}

bool CudaDecoderModel::PreparePersistentDecode(const Plan& plan, const TapTarget& taps) const {
  if (!options_.kernels.persistent_decode || !plan.decode || plan.row_split || streamer_ ||
      (taps.taps != nullptr && !taps.taps->empty()) || plan.seqs > kPdMaxRows) {
    return false;
  }
  const ModelConfig& c = config_;
  if (persistent_ == nullptr) {
    persistent_ = MakeState(layers_, *kv_, lm_head_, c, options_.kernels);
  }
  PersistentDecodeState& s = *persistent_;
  if (!s.supported.ok()) return false;
  if (s.steps.count(plan.seqs) > 0) return true;
  if (s.too_large.count(plan.seqs) > 0) return false;
  // This batch size's schedule (never inside a capture: Launch calls this before RunDecodeGraph).
  DecodeScheduleOptions so;
  so.workers = s.workers;
  so.rows = plan.seqs;
  so.rope_in_attention = true;  // decode steps: one new token per sequence
  absl::StatusOr<DecodeSchedule> sched = PlanDecodeStep(s.shape, c, so);
  absl::Status ok = sched.status();
  if (ok.ok()) ok = CheckDecodeSchedule(*sched, s.shape, c);
  if (!ok.ok()) {
    spdlog::error("cuda model: persistent decode schedule: {}", std::string(ok.message()));
    return false;
  }
  PersistentStep st;
  UploadSchedule(*sched, s, &st);
  if (persistent_trace_) {
    st.trace = DeviceBuffer(st.host_tasks.size() * 3 * sizeof(unsigned long long));
    CUDA_CHECK(cudaMemset(st.trace.get(), 0, st.trace.bytes()));
  }
  st.num_counters = sched->num_counters();
  st.rope_in_attention = so.rope_in_attention;
  st.counters = DeviceBuffer((st.num_counters + 1) * sizeof(unsigned));
  CUDA_CHECK(cudaMemset(st.counters.get(), 0, st.counters.bytes()));
  DecodeAttentionArgs a;
  a.num_seqs = plan.seqs;
  a.num_heads = c.num_heads;
  a.max_context = c.max_context;
  a.fixed_partition = options_.batch_invariant ? kDecodePartition : 0;
  st.grid_splits = DecodeAttentionGridSplits(a, kv_->layer(0));
  // The attention partials (rows x heads x partitions) must fit the decode workspace, and the
  // step's shared memory (input rows, rings, partial sums) one CTA.
  const size_t ws = size_t(plan.seqs) * c.num_heads * st.grid_splits * (c.head_dim + 2) * 4;
  PersistentDecodeParams probe;
  probe.rows = plan.seqs;
  probe.hidden = c.hidden_size;
  probe.inter = c.intermediate_size;
  probe.num_heads = c.num_heads;
  probe.head_dim = c.head_dim;
  probe.max_jobs = st.max_jobs;
  const size_t limit = PersistentDecodeSmemLimit(s.ctas_per_sm);
  if (ws > buf_->decode_ws.bytes() || PersistentDecodeSmemBytes(probe) > limit) {
    spdlog::info(
        "cuda model: decode steps of {} sequences run kernel per op (persistent decode "
        "needs {} bytes of shared memory per CTA)",
        plan.seqs, PersistentDecodeSmemBytes(probe));
    s.too_large.insert(plan.seqs);
    return false;
  }
  // The deepest weight ring that fits beside the rows and partial sums.
  probe.num_kv_heads = c.num_kv_heads;
  probe.attn_groups = 2;
  if (PersistentDecodeSmemBytes(probe) > limit) probe.attn_groups = 1;
  st.attn_groups = probe.attn_groups;
  // Two CTAs a SM run the smallest ring only (LaunchPersistentDecode).
  for (int ring : kPdRingBytes) {
    probe.ring_bytes = st.ring_bytes = ring;
    if (PersistentDecodeSmemBytes(probe) <= limit &&
        (s.ctas_per_sm == 1 || ring == kPdRingBytes[2])) {
      break;
    }
  }
  spdlog::info(
      "cuda model: decode steps of {} sequences run persistent: {} tasks in {} stages on {} "
      "CTAs, {} KiB weight ring per warp, {} bytes of shared memory",
      plan.seqs, st.host_tasks.size(), st.num_counters, s.workers, st.ring_bytes / 1024,
      PersistentDecodeSmemBytes(probe));
  s.steps.emplace(plan.seqs, std::move(st));
  return true;
}

void CudaDecoderModel::EnqueuePersistentStep(const Plan& plan) const {
  const ModelConfig& c = config_;
  const Buffers& b = *buf_;
  const PersistentDecodeState& s = *persistent_;
  const PersistentStep& st = s.steps.at(plan.seqs);
  EmbeddingForward(
      {embedding_.get<__nv_bfloat16>(), b.dev(b.ids), b.x.get<float>(), plan.tokens, c.hidden_size},
      stream_);
  PersistentDecodeParams p;
  p.tasks = st.tasks.get<PdTask>();
  p.queue = st.queue.get<int32_t>();
  p.queue_begin = st.queue_begin.get<int32_t>();
  p.blocks = s.blocks.get<PdBlock>();
  p.counters = st.counters.get<unsigned>();
  p.done = p.counters + st.num_counters;
  p.num_counters = st.num_counters;
  p.rows = plan.seqs;
  p.hidden = c.hidden_size;
  p.inter = c.intermediate_size;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.vocab = c.vocab_size;
  p.eps = c.rms_norm_eps;
  p.rope_interleaved = c.rope_style == RopeStyle::kInterleaved ? 1 : 0;
  p.rope_in_attention = st.rope_in_attention ? 1 : 0;
  p.x = b.x.get<float>();
  p.qkv = b.qkv.get<__nv_bfloat16>();
  p.attn = b.attn.get<__nv_bfloat16>();
  p.act = b.h.get<__nv_bfloat16>();
  p.logits = b.logits.get<float>();
  p.positions = b.dev(b.positions);
  p.slots = b.dev(b.slots);
  p.block_tables = b.dev(b.tables);
  p.context_lens = b.dev(b.ctx);
  p.max_blocks_per_seq = b.max_blocks;
  p.block_size = kv_->options().block_size;
  p.inv_freq = inv_freq_.get<float>();
  p.final_norm = final_norm_.get<float>();
  p.lm_head = s.lm_head;
  p.grid_splits = st.grid_splits;
  p.fixed_partition = options_.batch_invariant ? kDecodePartition : 0;
  p.ws_splits = st.grid_splits;
  p.ws = b.decode_ws.get<float>();
  p.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.max_jobs = st.max_jobs;
  p.ring_bytes = st.ring_bytes;
  p.ctas_per_sm = s.ctas_per_sm;
  p.attn_groups = st.attn_groups;
  p.trace = st.trace.bytes() > 0 ? st.trace.get<unsigned long long>() : nullptr;
  LaunchPersistentDecode(p, s.workers, stream_);
}

}  // namespace dq::cuda
