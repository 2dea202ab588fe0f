#include "engine/cpu/decode_schedule_executor.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/quant/ggml_blocks.h"

namespace dq::cpu {
namespace {

// The step's buffers, shared by the workers; the schedule's counters order their accesses.
struct Step {
  const ModelProgram& p;
  const ModelConfig& c;
  KvBlockPool& pool;
  std::vector<float> inv_freq;
  std::vector<AttentionToken> tokens;  // one per item, at its new position
  int64_t b = 0;
  std::vector<float> x, qkv, attn, act, logits;

  int64_t qkv_width() const { return c.q_dim() + 2 * c.kv_dim(); }
};

// A worker's scratch: the RMSNorm of x that each task recomputes, a dequantized weight row, and
// attention scores.
struct Scratch {
  std::vector<float> norm, row, scores;
};

const float* NormOfX(const Step& s, const std::vector<float>& weight, Scratch& w) {
  w.norm.resize(s.b * s.c.hidden_size);
  RmsNorm(s.x.data(), weight.data(), s.b, s.c.hidden_size, s.c.rms_norm_eps, w.norm.data());
  return w.norm.data();
}

void Qkv(const DecodeTask& t, const AttentionBlock& a, Step& s, Scratch& w) {
  const float* n = NormOfX(s, a.norm, w);
  const int64_t q = s.c.q_dim(), kv = s.c.kv_dim();
  for (int64_t r = t.begin; r < t.end; ++r) {
    const LinearWeight& m = r < q ? a.q : r < q + kv ? a.k : a.v;
    const int64_t local = r < q ? r : r < q + kv ? r - q : r - q - kv;
    for (int64_t i = 0; i < s.b; ++i) {
      s.qkv[i * s.qkv_width() + r] = LinearRowDot(m, local, n + i * s.c.hidden_size, w.row.data());
    }
  }
}

// Item (token i, KV head h): its q heads and k normalized and rotated, its K/V into the cache.
void RopeKv(const DecodeTask& t, const AttentionBlock& a, Step& s) {
  const ModelConfig& c = s.c;
  const int group = c.num_heads / c.num_kv_heads;
  for (int64_t item = t.begin; item < t.end; ++item) {
    const int64_t i = item / c.num_kv_heads;
    const int h = static_cast<int>(item % c.num_kv_heads);
    float* q = s.qkv.data() + i * s.qkv_width();
    float* k = q + c.q_dim() + int64_t{h} * c.head_dim;
    const float* v = q + c.q_dim() + c.kv_dim() + int64_t{h} * c.head_dim;
    const int pos = s.tokens[i].position;
    for (int j = h * group; j < (h + 1) * group; ++j) {
      float* qh = q + int64_t{j} * c.head_dim;
      if (a.has_qk_norm()) RmsNorm(qh, a.q_norm.data(), 1, c.head_dim, c.rms_norm_eps, qh);
      ApplyRope(qh, 1, c.head_dim, pos, s.inv_freq.data(), c.rope_style);
    }
    if (a.has_qk_norm()) RmsNorm(k, a.k_norm.data(), 1, c.head_dim, c.rms_norm_eps, k);
    ApplyRope(k, 1, c.head_dim, pos, s.inv_freq.data(), c.rope_style);
    const int32_t block = s.tokens[i].seq->blocks[pos / s.pool.block_size()];
    const int slot = pos % s.pool.block_size();
    std::copy_n(k, c.head_dim, s.pool.key(a.kv_layer, block, slot) + int64_t{h} * c.head_dim);
    std::copy_n(v, c.head_dim, s.pool.value(a.kv_layer, block, slot) + int64_t{h} * c.head_dim);
  }
}

void Attention(const DecodeTask& t, const AttentionBlock& a, Step& s, Scratch& w) {
  const ModelConfig& c = s.c;
  const int group = c.num_heads / c.num_kv_heads;
  for (int64_t item = t.begin; item < t.end; ++item) {
    const int64_t i = item / c.num_kv_heads;
    const int h = static_cast<int>(item % c.num_kv_heads);
    for (int j = h * group; j < (h + 1) * group; ++j) {
      const int64_t off = int64_t{j} * c.head_dim;
      AttentionHead(s.pool, a.kv_layer, s.tokens[i], s.qkv.data() + i * s.qkv_width() + off, h,
                    s.attn.data() + i * c.q_dim() + off, w.scores);
    }
  }
}

// x[:, rows] += W[rows] · in, for in of `in_width` per token.
void AddRows(const DecodeTask& t, const LinearWeight& m, const std::vector<float>& in,
             int64_t in_width, Step& s, Scratch& w) {
  for (int64_t r = t.begin; r < t.end; ++r) {
    for (int64_t i = 0; i < s.b; ++i) {
      s.x[i * s.c.hidden_size + r] += LinearRowDot(m, r, in.data() + i * in_width, w.row.data());
    }
  }
}

void GateUp(const DecodeTask& t, const MlpBlock& m, Step& s, Scratch& w) {
  const float* n = NormOfX(s, m.norm, w);
  const int64_t inter = s.c.intermediate_size;
  for (int64_t r = t.begin; r < t.end; ++r) {
    for (int64_t i = 0; i < s.b; ++i) {
      const float* ni = n + i * s.c.hidden_size;
      float g = LinearRowDot(m.gate, r, ni, w.row.data());
      const float u = LinearRowDot(m.up, r, ni, w.row.data());
      SiluMulInPlace(&g, &u, 1);
      s.act[i * inter + r] = g;
    }
  }
}

void LmHead(const DecodeTask& t, Step& s, Scratch& w) {
  const float* n = NormOfX(s, s.p.final_norm, w);
  for (int64_t r = t.begin; r < t.end; ++r) {
    for (int64_t i = 0; i < s.b; ++i) {
      s.logits[i * s.c.vocab_size + r] =
          LinearRowDot(s.p.lm_head, r, n + i * s.c.hidden_size, w.row.data());
    }
  }
}

void RunTask(const DecodeTask& t, bool rope_in_attention, Step& s, Scratch& w) {
  if (t.kind == DecodeTaskKind::kLmHead) return LmHead(t, s, w);
  const Block& block = s.p.layers[t.layer].blocks[t.block];
  if (const auto* a = std::get_if<AttentionBlock>(&block)) {
    switch (t.kind) {
      case DecodeTaskKind::kQkv:
        return Qkv(t, *a, s, w);
      case DecodeTaskKind::kRopeKv:
        return RopeKv(t, *a, s);
      case DecodeTaskKind::kAttention:
        if (rope_in_attention) RopeKv(t, *a, s);
        return Attention(t, *a, s, w);
      default:
        return AddRows(t, a->o, s.attn, s.c.q_dim(), s, w);
    }
  }
  const MlpBlock& m = std::get<MlpBlock>(block);
  if (t.kind == DecodeTaskKind::kGateUp) return GateUp(t, m, s, w);
  AddRows(t, m.down, s.act, s.c.intermediate_size, s, w);
}

absl::Status CheckStep(const DecodeSchedule& schedule, const ModelProgram& p, const ModelConfig& c,
                       std::span<const DecodeStepItem> items, const KvBlockPool& pool) {
  bool weight_only = p.lm_head.mode == ComputeMode::kWeightOnly;
  p.ForEachLinear(
      [&](const LinearWeight& w) { weight_only &= w.mode == ComputeMode::kWeightOnly; });
  if (!weight_only) {
    return absl::FailedPreconditionError(
        "the persistent decode schedule runs weight-only linears; this program quantizes "
        "activations (decode it with DecoderModel)");
  }
  int64_t rows = 0;
  for (const DecodeStepItem& it : items) {
    bool ok = it.seq != nullptr && !it.tokens.empty();
    for (int32_t t : it.tokens) ok = ok && t >= 0 && t < c.vocab_size;
    const int64_t end = ok ? it.seq->num_tokens + static_cast<int64_t>(it.tokens.size()) : 0;
    if (!ok || static_cast<int64_t>(it.seq->blocks.size()) * pool.block_size() < end ||
        end > c.max_context) {
      return absl::InvalidArgumentError(
          "decode step item: give a sequence with KV blocks for its new tokens and tokens in the "
          "vocabulary");
    }
    rows += static_cast<int64_t>(it.tokens.size());
  }
  if (schedule.options.rope_in_attention && rows != static_cast<int64_t>(items.size())) {
    return absl::InvalidArgumentError(
        "a schedule with rope_in_attention runs one new token per sequence; plan verification "
        "steps without it");
  }
  if (rows != schedule.options.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(rows, " new tokens for a schedule of ", schedule.options.rows, " rows"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunDecodeSchedule(const DecodeSchedule& schedule, const ModelProgram& program,
                               const ModelConfig& config, std::span<const DecodeStepItem> items,
                               KvBlockPool& pool, std::vector<float>* logits) {
  DQ_RETURN_IF_ERROR(CheckStep(schedule, program, config, items, pool));
  Step s{program, config, pool};
  s.inv_freq = RopeInverseFrequencies(config.head_dim, config.rope_theta);
  s.b = schedule.options.rows;
  s.x.resize(s.b * config.hidden_size);
  s.qkv.resize(s.b * s.qkv_width());
  s.attn.resize(s.b * config.q_dim());
  s.act.resize(s.b * config.intermediate_size);
  s.logits.resize(s.b * config.vocab_size);
  for (const DecodeStepItem& it : items) {
    for (size_t j = 0; j < it.tokens.size(); ++j) {
      const int64_t row = static_cast<int64_t>(s.tokens.size());
      s.tokens.push_back({it.seq, it.seq->num_tokens + static_cast<int>(j)});
      DequantizeRow(program.embedding.dtype, program.embedding.row(it.tokens[j]),
                    s.x.data() + row * config.hidden_size, config.hidden_size);
    }
  }
  std::vector<std::atomic<int>> counters(schedule.num_counters());
  std::vector<std::thread> workers;
  for (const std::vector<int>& queue : schedule.queues) {
    workers.emplace_back([&, &queue = queue] {
      Scratch w;
      w.row.resize(std::max({int64_t{config.hidden_size}, int64_t{config.q_dim()},
                             int64_t{config.intermediate_size}}));
      for (int idx : queue) {
        const DecodeTask& t = schedule.tasks[idx];
        while (t.wait_counter >= 0 &&
               counters[t.wait_counter].load(std::memory_order_acquire) < t.wait_target) {
          std::this_thread::yield();
        }
        RunTask(t, schedule.options.rope_in_attention, s, w);
        counters[t.signal_counter].fetch_add(1, std::memory_order_release);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  for (const DecodeStepItem& it : items) {
    it.seq->num_tokens += static_cast<int>(it.tokens.size());
  }
  *logits = std::move(s.logits);
  return absl::OkStatus();
}

}  // namespace dq::cpu
