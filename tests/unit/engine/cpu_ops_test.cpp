// CPU kernels against naive double-precision references on fresh random data.
#include "engine/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/quant/ggml_blocks.h"

namespace dq::cpu {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Stores `values` as an F32 or BF16 LinearWeight (BF16 rounds; the reference uses the
// rounded values).
LinearWeight MakeWeight(std::vector<float>& values, int64_t out, int64_t in, DType dtype) {
  LinearWeight w;
  w.dtype = dtype;
  w.out_features = out;
  w.in_features = in;
  w.row_bytes = DTypeRowBytes(dtype, in);
  w.owned.resize(w.row_bytes * out);
  for (int64_t i = 0; i < out * in; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&w.owned[i * 4], &values[i], 4);
    } else {
      const uint16_t b = F32ToBF16(values[i]);
      std::memcpy(&w.owned[i * 2], &b, 2);
      values[i] = BF16ToF32(b);
    }
  }
  w.data = w.owned.data();
  return w;
}

class MatMulTest : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(MatMulTest, MatchesDoubleReference) {
  const auto [rows, dtype] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(rows * 7 + static_cast<int>(dtype)));
  const int64_t out = 67, in = 96;
  std::vector<float> wv = Random(out * in, rng);
  LinearWeight w = MakeWeight(wv, out, in, dtype);
  std::vector<float> x = Random(rows * in, rng), y(rows * out);
  ThreadPool pool(2);
  MatMul(w, x.data(), rows, y.data(), pool);
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t r = 0; r < out; ++r) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        ref += double{wv[r * in + i]} * x[m * in + i];
        mag += std::abs(double{wv[r * in + i]} * x[m * in + i]);
      }
      ASSERT_NEAR(y[m * out + r], ref, 1e-5 * mag + 1e-6) << "row " << m << " out " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulTest,
                         ::testing::Combine(::testing::Values(1, 3, 8, 9, 40),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

TEST(CpuOpsTest, RmsNormMatchesReference) {
  std::mt19937 rng(1);
  const int64_t rows = 3, n = 40;
  std::vector<float> x = Random(rows * n, rng), w = Random(n, rng), out(rows * n);
  RmsNorm(x.data(), w.data(), rows, n, 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double{x[r * n + i]} * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[r * n + i], w[i] * x[r * n + i] * inv, 1e-5);
  }
}

TEST(CpuOpsTest, RopeStylesRotateTheDocumentedPairs) {
  const int head_dim = 8;
  const std::vector<float> inv = RopeInverseFrequencies(head_dim, 10000.0f);
  std::mt19937 rng(2);
  const std::vector<float> x = Random(head_dim, rng);
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    std::vector<float> y = x;
    ApplyRope(y.data(), 1, head_dim, 5, inv.data(), style);
    for (int i = 0; i < head_dim / 2; ++i) {
      const int a = style == RopeStyle::kNeox ? i : 2 * i;
      const int b = style == RopeStyle::kNeox ? i + head_dim / 2 : 2 * i + 1;
      const double ang = 5.0 * inv[i];
      EXPECT_NEAR(y[a], x[a] * std::cos(ang) - x[b] * std::sin(ang), 1e-5);
      EXPECT_NEAR(y[b], x[b] * std::cos(ang) + x[a] * std::sin(ang), 1e-5);
    }
  }
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], 1.0 / std::pow(10000.0, 2.0 / 8), 1e-7);
}

// Dense causal GQA attention in double, for a sequence whose KV sits in scattered blocks.
TEST(CpuOpsTest, PagedAttentionMatchesDenseCausalReference) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 2;
  o.head_dim = 16;
  o.block_size = 4;
  o.num_blocks = 16;
  KvBlockPool pool(o);
  const int heads = 6, len = 13, kv_dim = 32;
  KvSequence seq;
  seq.blocks = {9, 2, 14, 5};  // deliberately out of order
  std::mt19937 rng(3);
  std::vector<float> k = Random(len * kv_dim, rng), v = Random(len * kv_dim, rng);
  for (int p = 0; p < len; ++p) {
    std::copy_n(&k[p * kv_dim], kv_dim, pool.key(0, seq.blocks[p / 4], p % 4));
    std::copy_n(&v[p * kv_dim], kv_dim, pool.value(0, seq.blocks[p / 4], p % 4));
  }
  std::vector<AttentionToken> tokens = {{&seq, 0}, {&seq, 6}, {&seq, 12}};
  std::vector<float> q = Random(tokens.size() * heads * 16, rng), out(q.size());
  ThreadPool threads(2);
  PagedAttention(pool, 0, tokens, q.data(), heads, out.data(), threads);
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int h = 0; h < heads; ++h) {
      const int g = h / 3, n = tokens[t].position + 1;
      const float* qh = &q[(t * heads + h) * 16];
      std::vector<double> s(n);
      double mx = -1e300, den = 0;
      for (int p = 0; p < n; ++p) {
        s[p] = 0;
        for (int i = 0; i < 16; ++i) s[p] += double{qh[i]} * k[p * kv_dim + g * 16 + i];
        s[p] /= 4.0;
        mx = std::max(mx, s[p]);
      }
      for (int p = 0; p < n; ++p) den += (s[p] = std::exp(s[p] - mx));
      for (int i = 0; i < 16; ++i) {
        double ref = 0;
        for (int p = 0; p < n; ++p) ref += s[p] / den * v[p * kv_dim + g * 16 + i];
        ASSERT_NEAR(out[(t * heads + h) * 16 + i], ref, 1e-5) << t << " " << h << " " << i;
      }
    }
  }
}

// AttentionOptions::bf16_p_key_tile (the CUDA bf16 prefill kernel's numerics): within bf16's
// rounding of P of the exact attention, not equal to it, and the key tile's size matters once a
// row spans several tiles (the running maximum rescales earlier tiles' rounded P).
TEST(CpuOpsTest, PagedAttentionWithBf16PTilesStaysWithinBf16OfExact) {
  KvCacheOptions o;
  o.num_layers = 1;
  o.num_kv_heads = 1;
  o.head_dim = 16;
  o.block_size = 8;
  o.num_blocks = 16;
  KvBlockPool pool(o);
  const int len = 100;
  KvSequence seq;
  for (int b = 0; b < 13; ++b) seq.blocks.push_back(12 - b);
  std::mt19937 rng(std::random_device{}());
  std::vector<float> k = Random(len * 16, rng), v = Random(len * 16, rng);
  for (float& x : k) x *= 4.0f;  // peaked rows: the running maximum moves between tiles
  for (int p = 0; p < len; ++p) {
    std::copy_n(&k[p * 16], 16, pool.key(0, seq.blocks[p / 8], p % 8));
    std::copy_n(&v[p * 16], 16, pool.value(0, seq.blocks[p / 8], p % 8));
  }
  std::vector<AttentionToken> tokens;
  for (int p : {0, 5, 40, 63, 64, 99}) tokens.push_back({&seq, p});
  std::vector<float> q = Random(tokens.size() * 16, rng);
  ThreadPool threads(2);
  std::vector<float> exact(q.size()), t64(q.size()), t16(q.size());
  PagedAttention(pool, 0, tokens, q.data(), 1, exact.data(), threads);
  PagedAttention(pool, 0, tokens, q.data(), 1, t64.data(), threads, {.bf16_p_key_tile = 64});
  PagedAttention(pool, 0, tokens, q.data(), 1, t16.data(), threads, {.bf16_p_key_tile = 16});
  double max64 = 0, max16 = 0, diff_tiles = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    max64 = std::max(max64, double(std::fabs(t64[i] - exact[i])));
    max16 = std::max(max16, double(std::fabs(t16[i] - exact[i])));
    if (i >= 3 * 16) diff_tiles = std::max(diff_tiles, double(std::fabs(t64[i] - t16[i])));
  }
  // |v| <= 1 and P's relative rounding is at most 2^-9.
  EXPECT_LT(max64, 4e-3);
  EXPECT_LT(max16, 4e-3);
  EXPECT_GT(max64, 0.0);
  EXPECT_GT(diff_tiles, 0.0) << "rows spanning several tiles should depend on the tile size";
  // Position 0 attends to one key: out = v_0 exactly, whatever the tiles.
  for (int d = 0; d < 16; ++d) EXPECT_EQ(t64[d], v[d]);
}

}  // namespace
}  // namespace dq::cpu
