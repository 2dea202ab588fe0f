#include "engine/cpu/cpu_ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <vector>

#include "common/dtype.h"
#include "engine/cpu/fp8_attention.h"
#include "engine/cpu/q8_dot.h"
#include "engine/cpu/q8_packed.h"
#include "engine/cpu/vec_ops.h"
#include "engine/quant/ggml_blocks.h"

namespace dq::cpu {
namespace {

// Up to this many rows, each output is one fused dequantize-dot over the stored row, so a
// sequence's result does not depend on how many others share its decode batch.
constexpr int64_t kFusedDotMaxRows = 8;
// Weight rows dequantized together in the tiled path; 8 rows of 4K floats stay in L2.
constexpr int64_t kRowTile = 8;

void MatMulFused(const LinearWeight& w, const float* x, int64_t rows, float* y, ThreadPool& pool) {
  const int64_t out = w.out_features, in = w.in_features;
  pool.ParallelFor(out, 32, [&](int64_t begin, int64_t end) {
    // Each output is DotRow(row, x_m) exactly (DotRows only shares x loads across rows), so a
    // (row, token) result is independent of the batch and of the thread split.
    constexpr int64_t kChunk = 32;
    for (int64_t r0 = begin; r0 < end; r0 += kChunk) {
      const int nr = static_cast<int>(std::min(kChunk, end - r0));
      for (int64_t m = 0; m < rows; ++m) {
        DotRows(w.dtype, w.row(r0), w.row_bytes, nr, x + m * in, in, y + m * out + r0);
      }
    }
  });
}

void MatMulTiled(const LinearWeight& w, const float* x, int64_t rows, float* y, ThreadPool& pool,
                 bool bf16_weights = false) {
  const int64_t out = w.out_features, in = w.in_features;
  const int64_t tiles = (out + kRowTile - 1) / kRowTile;
  pool.ParallelFor(tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(kRowTile * in);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r0 = t * kRowTile;
      const int64_t nr = std::min(kRowTile, out - r0);
      for (int64_t i = 0; i < nr; ++i) DequantizeLinearRow(w, r0 + i, &buf[i * in]);
      if (bf16_weights) {
        for (int64_t i = 0; i < nr * in; ++i) buf[i] = BF16ToF32(F32ToBF16(buf[i]));
      }
      int64_t m = 0;
      if (nr == kRowTile) {
        for (; m + 3 <= rows; m += 3) {
          for (int64_t i = 0; i < kRowTile; i += 4) {
            Dot4x3(&buf[i * in], x + m * in, in, y + m * out + r0 + i, out);
          }
        }
      }
      for (; m < rows; ++m) {
        const float* xm = x + m * in;
        float* ym = y + m * out + r0;
        for (int64_t i = 0; i < nr; ++i) ym[i] = DotF32(&buf[i * in], xm, in);
      }
    }
  });
}

}  // namespace

namespace {

// x quantized to 8-bit blocks once per row, then the packed groups' integer dots (q8_packed.h);
// a thread's groups are one contiguous stretch of the packed rows.
void MatMulQ8(const LinearWeight& w, const float* x, int64_t rows, float* y, ThreadPool& pool) {
  const Q8Packed& p = *w.q8_packed;
  const int64_t out = w.out_features, nb = p.nblocks;
  std::vector<Q8Block> xq(rows * nb);
  for (int64_t m = 0; m < rows; ++m) QuantizeQ8(x + m * w.in_features, w.in_features, &xq[m * nb]);
  pool.ParallelFor(p.groups(), 4, [&](int64_t begin, int64_t end) {
    constexpr int64_t kChunk = 8;  // groups per call: 128 outputs
    float tmp[kChunk * kQ8PackRows];
    for (int64_t g0 = begin; g0 < end; g0 += kChunk) {
      const int64_t ng = std::min(kChunk, end - g0), r0 = g0 * kQ8PackRows;
      const int64_t nr = std::min(ng * kQ8PackRows, out - r0);
      for (int64_t m = 0; m < rows; ++m) {
        DotQ8Packed(p, g0, ng, &xq[m * nb], tmp);
        std::copy_n(tmp, nr, y + m * out + r0);
      }
    }
  });
}

}  // namespace

void MatMul(const LinearWeight& w, const float* x, int64_t rows, float* y, ThreadPool& pool,
            const MatMulOptions& options) {
  if (options.bf16_weights && w.mode == ComputeMode::kWeightOnly) {
    return MatMulTiled(w, x, rows, y, pool, true);
  }
  if (options.q8_activations && w.q8_packed != nullptr) {
    return MatMulQ8(w, x, rows, y, pool);
  }
  if (w.codec != nullptr) {
    if (w.mode == ComputeMode::kWeightOnly) return MatMulTiled(w, x, rows, y, pool);
    // W8A8 / W4A4: the product of quantized weights and quantized activations, computed on
    // the dequantized images (exact products, fp32 accumulation).
    std::vector<float> xq(x, x + rows * w.in_features);
    for (int64_t m = 0; m < rows; ++m) {
      w.codec->QuantizeActivations(w.mode, w.act_global_scale, &xq[m * w.in_features],
                                   w.in_features);
    }
    return MatMulTiled(w, xq.data(), rows, y, pool);
  }
  if (rows <= kFusedDotMaxRows) {
    MatMulFused(w, x, rows, y, pool);
  } else {
    MatMulTiled(w, x, rows, y, pool);
  }
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    const float mean_sq = DotF32(xr, xr, n) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < n; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void SiluMulInPlace(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeluTanhMulInPlace(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

std::vector<float> RopeInverseFrequencies(int head_dim, float theta) {
  std::vector<float> inv(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(theta, exponent);
  }
  return inv;
}

void ApplyRope(float* x, int num_heads, int head_dim, int pos, const float* inv_freq,
               RopeStyle style) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < num_heads; ++h) {
      float* v = x + h * head_dim;
      const int a = style == RopeStyle::kNeox ? i : 2 * i;
      const int b = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const float x1 = v[a], x2 = v[b];
      v[a] = x1 * c - x2 * s;
      v[b] = x2 * c + x1 * s;
    }
  }
}

namespace {

// One query row of AttentionOptions::bf16_p_key_tile's attention: `keys` keys of `head_dim`,
// key(p) and value(p) their rows.
template <typename KeyFn, typename ValueFn>
void Bf16TiledRow(const float* qh, int keys, int head_dim, int tile, float scale_log2,
                  const KeyFn& key, const ValueFn& value, float* oh) {
  float row_max = -INFINITY, row_sum = 0.0f;
  std::fill(oh, oh + head_dim, 0.0f);
  std::vector<float> v(tile);
  for (int j0 = 0; j0 < keys; j0 += tile) {
    const int n = std::min(tile, keys - j0);
    float tile_max = -INFINITY;
    for (int i = 0; i < n; ++i) {
      v[i] = DotF32(qh, key(j0 + i), head_dim) * scale_log2;
      tile_max = std::max(tile_max, v[i]);
    }
    const float m_new = std::max(row_max, tile_max);
    const float alpha = std::exp2(row_max - m_new);
    row_max = m_new;
    row_sum *= alpha;
    for (int d = 0; d < head_dim; ++d) oh[d] *= alpha;
    for (int i = 0; i < n; ++i) {
      const float p = std::exp2(v[i] - row_max);
      row_sum += p;
      Axpy(BF16ToF32(F32ToBF16(p)), value(j0 + i), oh, head_dim);
    }
  }
  const float inv = 1.0f / row_sum;
  for (int d = 0; d < head_dim; ++d) oh[d] *= inv;
}

}  // namespace

void PagedAttention(const KvBlockPool& pool, int layer, std::span<const AttentionToken> tokens,
                    const float* q, int num_heads, float* out, ThreadPool& threads,
                    const AttentionOptions& options) {
  // The oracles of CUDA's kernels know no window and no other scale (CUDA runs neither yet).
  assert((options.window == 0 && options.scale == 0.0f) ||
         (!options.fp8 && options.bf16_p_key_tile == 0));
  if (options.fp8) return Fp8PagedAttention(pool, layer, tokens, q, num_heads, out, threads);
  const int head_dim = pool.options().head_dim;
  const int kv_heads = pool.options().num_kv_heads;
  const int group = num_heads / kv_heads;
  const int bs = pool.block_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t q_stride = int64_t{num_heads} * head_dim;
  const int64_t work = static_cast<int64_t>(tokens.size()) * num_heads;
  threads.ParallelFor(work, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t w = begin; w < end; ++w) {
      const AttentionToken& t = tokens[w / num_heads];
      const int h = static_cast<int>(w % num_heads);
      const int kvh = h / group;
      const float* qh = q + (w / num_heads) * q_stride + int64_t{h} * head_dim;
      float* oh = out + (w / num_heads) * q_stride + int64_t{h} * head_dim;
      const int n = t.position + 1;
      if (options.bf16_p_key_tile > 0) {
        const auto key = [&](int p) {
          return pool.key(layer, t.seq->blocks[p / bs], p % bs) + kvh * head_dim;
        };
        const auto value = [&](int p) {
          return pool.value(layer, t.seq->blocks[p / bs], p % bs) + kvh * head_dim;
        };
        Bf16TiledRow(qh, n, head_dim, options.bf16_p_key_tile, scale * 1.4426950408889634f, key,
                     value, oh);
        continue;
      }
      AttentionHead(pool, layer, t, qh, kvh, oh, scores, options.window, options.scale);
    }
  });
}

void AttentionHead(const KvBlockPool& pool, int layer, const AttentionToken& t, const float* qh,
                   int kv_head, float* oh, std::vector<float>& scores, int window, float scale) {
  const int head_dim = pool.options().head_dim;
  const int bs = pool.block_size();
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int n = t.position + 1;
  const int first = window > 0 ? std::max(0, n - window) : 0;
  scores.resize(n);
  float max_score = -INFINITY;
  for (int p = first; p < n; ++p) {
    const float* k = pool.key(layer, t.seq->blocks[p / bs], p % bs) + kv_head * head_dim;
    scores[p] = DotF32(qh, k, head_dim) * scale;
    max_score = std::max(max_score, scores[p]);
  }
  float denom = 0.0f;
  for (int p = first; p < n; ++p) {
    scores[p] = std::exp(scores[p] - max_score);
    denom += scores[p];
  }
  std::fill(oh, oh + head_dim, 0.0f);
  for (int p = first; p < n; ++p) {
    const float* v = pool.value(layer, t.seq->blocks[p / bs], p % bs) + kv_head * head_dim;
    Axpy(scores[p] / denom, v, oh, head_dim);
  }
}

float LinearRowDot(const LinearWeight& w, int64_t r, const float* x, float* row) {
  if (w.codec == nullptr) return DotRow(w.dtype, w.row(r), x, w.in_features);
  DequantizeLinearRow(w, r, row);
  return DotF32(row, x, w.in_features);
}

}  // namespace dq::cpu
