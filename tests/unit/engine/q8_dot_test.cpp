// The fast CPU decode path's kernels (engine/cpu/q8_dot.h, q8_packed.h) on fresh random data:
// the 8-bit blocks round as defined (vector == scalar bitwise), the packed kernels of every ISA
// this CPU has equal the scalar dot on the GGUF rows bitwise, and stay within the 8-bit rounding
// of x of the fp32 reference (DotRow); MatMul takes the path only where asked.
#include "engine/cpu/q8_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/q8_packed.h"
#include "engine/quant/ggml_blocks.h"

namespace dq::cpu {
namespace {

int64_t BlockBytes(DType t) { return t == DType::kQ4_1 ? 20 : 34; }

// Random GGUF blocks of `t`: f16 scales in a normal range, random codes.
std::vector<uint8_t> RandomRows(DType t, int64_t rows, int64_t nblocks, std::mt19937_64& rng) {
  const int64_t bytes = BlockBytes(t);
  std::vector<uint8_t> out(rows * nblocks * bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int64_t b = 0; b < rows * nblocks; ++b) {
    uint8_t* blk = out.data() + b * bytes;
    for (int64_t i = 0; i < bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
    const uint16_t d = F32ToF16(scale(rng)), m = F32ToF16(-8 * scale(rng));
    std::memcpy(blk, &d, 2);
    if (t == DType::kQ4_1) std::memcpy(blk + 2, &m, 2);
  }
  return out;
}

std::vector<Q8Isa> IsasHere() {
  std::vector<Q8Isa> isas;
  for (Q8Isa i : {Q8Isa::kScalar, Q8Isa::kAvx2, Q8Isa::kAvxVnni, Q8Isa::kAvx512Vnni}) {
    if (Q8IsaAvailable(i)) isas.push_back(i);
  }
  return isas;
}

TEST(Q8Dot, BlocksRoundToTheNearestStepOfAmaxOver127) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(32 * 9);
  for (float& v : x) v = n(rng);
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;             // an all-zero block stays zero
  for (int i = 64; i < 96; ++i) x[i] = 0.5f * (i - 80);  // exact ties: to even
  std::vector<Q8Block> q(9), ref(9);
  QuantizeQ8(x.data(), x.size(), q.data());
  QuantizeQ8Scalar(x.data(), x.size(), ref.data());
  for (int b = 0; b < 9; ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    EXPECT_EQ(q[b].d, amax / 127.0f) << b;
    EXPECT_EQ(std::memcmp(&q[b], &ref[b], sizeof(Q8Block)), 0) << "vector == scalar, block " << b;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      if (q[b].d == 0.0f) {
        EXPECT_EQ(q[b].q[i], 0);
        continue;
      }
      EXPECT_LE(std::fabs(q[b].q[i] * q[b].d - xb[i]), 0.5f * q[b].d * 1.0001f) << i;
      sum += q[b].q[i];
    }
    EXPECT_EQ(q[b].sum, sum);
    EXPECT_EQ(q[b].s, q[b].d * static_cast<float>(sum));
  }
  EXPECT_EQ(q[1].d, 0.0f);
  // Block 2 is -8, -7.5, ..., 7.5 with amax 8: x / d = 15.875 * x, no exact ties; check one
  // tie directly instead: 2.5 steps rounds to 2.
  std::vector<float> tie(32, 0.0f);
  tie[0] = 127.0f;
  tie[1] = 2.5f;
  tie[2] = -3.5f;
  Q8Block t;
  QuantizeQ8(tie.data(), 32, &t);
  EXPECT_EQ(t.q[1], 2);
  EXPECT_EQ(t.q[2], -4);
}

// Every ISA's packed kernel against DotQ8Scalar on the GGUF rows (bitwise), and DotQ8Scalar
// within the 8-bit rounding bound of x of the fp32 DotRow.
TEST(Q8Dot, PackedKernelsEqualTheScalarDotAndStayWithinTheRoundingOfX) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const std::vector<Q8Isa> isas = IsasHere();
  std::printf("q8 packed kernels tested:");
  for (Q8Isa i : isas) std::printf(" %s", Q8IsaName(i));
  std::printf(" (best here: %s)\n", Q8IsaName(Q8Isa::kBest));
  int judged = 0;
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    for (int64_t nb : {1, 7, 18, 48}) {
      for (int64_t out : {16, 37}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(t) << " " << nb << " blocks, " << out);
        const std::vector<uint8_t> rows = RandomRows(t, out, nb, rng);
        const int64_t row_bytes = nb * BlockBytes(t), in = nb * 32;
        std::vector<float> x(in), w(in);
        for (float& v : x) v = n(rng);
        std::vector<Q8Block> q(nb);
        QuantizeQ8(x.data(), in, q.data());
        const auto packed = PackQ8(t, rows.data(), row_bytes, out, in);
        for (Q8Isa isa : isas) {
          std::vector<float> got(packed->groups() * kQ8PackRows, -1.0f);
          DotQ8Packed(*packed, 0, packed->groups(), q.data(), got.data(), isa);
          for (int64_t r = 0; r < out; ++r) {
            ASSERT_EQ(got[r], DotQ8Scalar(t, rows.data() + r * row_bytes, q.data(), nb))
                << Q8IsaName(isa) << " row " << r;
            ++judged;
          }
          for (int64_t r = out; r < static_cast<int64_t>(got.size()); ++r) EXPECT_EQ(got[r], 0.0f);
        }
        for (int64_t r = 0; r < out; ++r) {
          const uint8_t* row = rows.data() + r * row_bytes;
          DequantizeRow(t, row, w.data(), in);
          double abs_sum = 0, bound = 0;
          for (int64_t i = 0; i < in; ++i) {
            abs_sum += std::fabs(double{w[i]} * x[i]);
            bound += std::fabs(w[i]) * 0.5 * q[i / 32].d;  // |x - d q| <= d / 2
          }
          const float fast = DotQ8Scalar(t, row, q.data(), nb);
          const float reference = DotRow(t, row, x.data(), in);
          EXPECT_LE(std::fabs(fast - reference), bound * 1.001 + 1e-5 * abs_sum);
          if (r == 0) EXPECT_GT(std::fabs(fast - reference), 0.0f) << "the rounding should show";
        }
      }
    }
  }
  EXPECT_GT(judged, 0);
}

TEST(Q8Dot, MatMulTakesItOnlyWhereAsked) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t out = 70, in = 576, nb = in / 32;
  std::vector<uint8_t> rows = RandomRows(DType::kQ4_1, out, nb, rng);
  LinearWeight w;
  w.dtype = DType::kQ4_1;
  w.out_features = out;
  w.in_features = in;
  w.row_bytes = nb * 20;
  w.data = rows.data();
  // More rows than the fp32 path's fused limit (8): the q8 path takes any batch.
  constexpr int64_t kRows = 11;
  std::vector<float> x(kRows * in), exact(kRows * out), fast(kRows * out), unpacked(kRows * out);
  for (float& v : x) v = n(rng);
  ThreadPool pool(2);
  MatMul(w, x.data(), kRows, exact.data(), pool);
  MatMul(w, x.data(), kRows, unpacked.data(), pool, {.q8_activations = true});
  EXPECT_EQ(exact, unpacked) << "without packed rows the fp32 path runs";
  PackLinearForQ8(w);
  ASSERT_NE(w.q8_packed, nullptr);
  MatMul(w, x.data(), kRows, fast.data(), pool, {.q8_activations = true});
  std::vector<Q8Block> q(nb);
  for (int64_t m = 0; m < kRows; ++m) {
    QuantizeQ8(x.data() + m * in, in, q.data());
    for (int64_t r = 0; r < out; ++r) {
      EXPECT_EQ(fast[m * out + r], DotQ8Scalar(DType::kQ4_1, w.row(r), q.data(), nb));
    }
  }
  EXPECT_NE(exact, fast);
  MatMul(w, x.data(), kRows, fast.data(), pool);
  EXPECT_EQ(exact, fast) << "packed rows are used only when asked";
}

}  // namespace
}  // namespace dq::cpu
