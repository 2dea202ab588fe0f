#include "engine/cpu/fp8_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/vec_ops.h"
#include "engine/quant/fp8_e4m3.h"

namespace dq::cpu {
namespace {

constexpr float kTiny = 1e-30f;  // amax floor, as the kernel's
constexpr float kPBias = 8.0f;   // P is rounded times 2^8
constexpr float kLog2e = 1.4426950408889634f;

// One sequence's K and V over the pass's context, rounded through e4m3 per channel.
struct QuantizedKv {
  const KvSequence* seq = nullptr;
  int ctx = 0;
  std::vector<float> amax_k;  // [kv_heads * head_dim], clamped to >= kTiny
  std::vector<float> k, v;    // [ctx][kv_heads * head_dim]: k', v'
};

// The sequences of `tokens`, each with its context; seq_of[t] indexes token t's.
std::vector<QuantizedKv> Contexts(std::span<const AttentionToken> tokens,
                                  std::vector<int>* seq_of) {
  std::vector<QuantizedKv> seqs;
  seq_of->resize(tokens.size());
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto it = std::find_if(seqs.begin(), seqs.end(),
                           [&](const QuantizedKv& s) { return s.seq == tokens[t].seq; });
    if (it == seqs.end()) {
      it = seqs.emplace(seqs.end());
      it->seq = tokens[t].seq;
    }
    it->ctx = std::max(it->ctx, tokens[t].position + 1);
    (*seq_of)[t] = static_cast<int>(it - seqs.begin());
  }
  return seqs;
}

// K' and V' of KV head `kvh` of one sequence (its channels of s.k, s.v and s.amax_k).
void QuantizeKvHead(const KvBlockPool& pool, int layer, int kvh, QuantizedKv& s) {
  const int hd = pool.options().head_dim, bs = pool.block_size();
  const int64_t kv_dim = int64_t{pool.options().num_kv_heads} * hd, c0 = int64_t{kvh} * hd;
  std::vector<float> ak(hd, 0.0f), av(hd, 0.0f);
  for (int p = 0; p < s.ctx; ++p) {
    const float* k = pool.key(layer, s.seq->blocks[p / bs], p % bs) + c0;
    const float* v = pool.value(layer, s.seq->blocks[p / bs], p % bs) + c0;
    for (int d = 0; d < hd; ++d) {
      ak[d] = std::max(ak[d], std::fabs(k[d]));
      av[d] = std::max(av[d], std::fabs(v[d]));
    }
  }
  for (int d = 0; d < hd; ++d) {
    ak[d] = std::max(ak[d], kTiny);
    av[d] = std::max(av[d], kTiny);
    s.amax_k[c0 + d] = ak[d];
  }
  for (int p = 0; p < s.ctx; ++p) {
    const float* k = pool.key(layer, s.seq->blocks[p / bs], p % bs) + c0;
    const float* v = pool.value(layer, s.seq->blocks[p / bs], p % bs) + c0;
    float* kq = s.k.data() + p * kv_dim + c0;
    float* vq = s.v.data() + p * kv_dim + c0;
    for (int d = 0; d < hd; ++d) {
      kq[d] = E4m3RoundTrip(k[d], kE4M3Max / ak[d], ak[d] / kE4M3Max);
      vq[d] = E4m3RoundTrip(v[d], kE4M3Max / av[d], av[d] / kE4M3Max);
    }
  }
}

// q' of one head: K's channel scales folded in, one e4m3 scale for the row.
void QuantizeQ(const float* q, const float* amax_k, int hd, float* x, float* q_eff) {
  float m = 0.0f;
  for (int d = 0; d < hd; ++d) {
    x[d] = q[d] * (amax_k[d] / kE4M3Max);
    m = std::max(m, std::fabs(x[d]));
  }
  const float qs = std::max(m, kTiny) / kE4M3Max;
  for (int d = 0; d < hd; ++d)
    q_eff[d] = E4m3RoundTrip(x[d], 1.0f / qs, qs) / (amax_k[d] / kE4M3Max);
}

// One query row against keys [0, n) of its sequence's K', V': softmax with P rounded to e4m3.
void AttendRow(const float* q_eff, const QuantizedKv& s, int64_t kv_off, int64_t kv_dim, int hd,
               int n, float scale_log2, std::vector<float>& scores, float* out) {
  scores.resize(n);
  float m = -INFINITY;
  for (int p = 0; p < n; ++p) {
    scores[p] = DotF32(q_eff, s.k.data() + p * kv_dim + kv_off, hd);
    m = std::max(m, scores[p]);
  }
  float denom = 0.0f;
  std::fill(out, out + hd, 0.0f);
  for (int p = 0; p < n; ++p) {
    const float pw = std::exp2((scores[p] - m) * scale_log2 + kPBias);
    denom += pw;
    Axpy(E4M3ToFloat(FloatToE4M3(pw)), s.v.data() + p * kv_dim + kv_off, out, hd);
  }
  const float inv = 1.0f / denom;
  for (int d = 0; d < hd; ++d) out[d] *= inv;
}

}  // namespace

float E4m3RoundTrip(float x, float inv, float scale) {
  return E4M3ToFloat(FloatToE4M3(x * inv)) * scale;
}

void Fp8PagedAttention(const KvBlockPool& pool, int layer, std::span<const AttentionToken> tokens,
                       const float* q, int num_heads, float* out, ThreadPool& threads) {
  const int hd = pool.options().head_dim;
  const int kv_heads = pool.options().num_kv_heads;
  const int group = num_heads / kv_heads;
  const int64_t kv_dim = int64_t{kv_heads} * hd, q_stride = int64_t{num_heads} * hd;
  std::vector<int> seq_of;
  std::vector<QuantizedKv> seqs = Contexts(tokens, &seq_of);
  for (QuantizedKv& s : seqs) {
    s.amax_k.resize(kv_dim);
    s.k.resize(s.ctx * kv_dim);
    s.v.resize(s.ctx * kv_dim);
  }
  threads.ParallelFor(
      static_cast<int64_t>(seqs.size()) * kv_heads, 1, [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) {
          QuantizeKvHead(pool, layer, static_cast<int>(w % kv_heads), seqs[w / kv_heads]);
        }
      });
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float scale_log2 = scale * kLog2e;
  threads.ParallelFor(static_cast<int64_t>(tokens.size()) * num_heads, 1,
                      [&](int64_t begin, int64_t end) {
                        std::vector<float> x(hd), q_eff(hd), scores;
                        for (int64_t w = begin; w < end; ++w) {
                          const int64_t t = w / num_heads;
                          const int h = static_cast<int>(w % num_heads);
                          const QuantizedKv& s = seqs[seq_of[t]];
                          const int64_t kv_off = int64_t{h / group} * hd;
                          QuantizeQ(q + t * q_stride + int64_t{h} * hd, s.amax_k.data() + kv_off,
                                    hd, x.data(), q_eff.data());
                          AttendRow(q_eff.data(), s, kv_off, kv_dim, hd, tokens[t].position + 1,
                                    scale_log2, scores, out + t * q_stride + int64_t{h} * hd);
                        }
                      });
}

}  // namespace dq::cpu
