// The fast CPU decode path's kernels (engine/cpu/q8_dot.h) on fresh random data: the 8-bit
// blocks round as defined, the vector dots equal the scalar ones up to fp32 summation order, and
// both stay within the 8-bit rounding of x of the fp32 reference (DotRow); through MatMul with
// q8_activations, a decode-sized product stays within the same bound.
#include "engine/cpu/q8_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "common/thread_pool.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/quant/ggml_blocks.h"

namespace dq::cpu {
namespace {

// Random GGUF blocks of `t`: f16 scales in a normal range, random codes.
std::vector<uint8_t> RandomRow(DType t, int64_t nblocks, std::mt19937_64& rng) {
  const int64_t bytes = t == DType::kQ4_1 ? 20 : 34;
  std::vector<uint8_t> row(nblocks * bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int64_t b = 0; b < nblocks; ++b) {
    uint8_t* blk = row.data() + b * bytes;
    for (int64_t i = 0; i < bytes; ++i) blk[i] = static_cast<uint8_t>(byte(rng));
    const uint16_t d = F32ToF16(scale(rng)), m = F32ToF16(-8 * scale(rng));
    std::memcpy(blk, &d, 2);
    if (t == DType::kQ4_1) std::memcpy(blk + 2, &m, 2);
  }
  return row;
}

TEST(Q8Dot, BlocksRoundToTheNearestStepOfAmaxOver127) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.37f * i) * (i < 32 ? 1.0f : 0.0f);
  std::vector<Q8Block> q(2);
  QuantizeQ8(x.data(), 64, q.data());
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  EXPECT_FLOAT_EQ(q[0].d, amax / 127.0f);
  int sum = 0;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(q[0].q[i], std::lround(x[i] / q[0].d)) << i;
    EXPECT_LE(std::fabs(q[0].q[i] * q[0].d - x[i]), 0.5f * q[0].d * 1.0001f) << i;
    sum += q[0].q[i];
  }
  EXPECT_FLOAT_EQ(q[0].s, q[0].d * sum);
  EXPECT_EQ(q[1].d, 0.0f);  // an all-zero block stays zero
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[1].q[i], 0);
}

TEST(Q8Dot, VectorEqualsScalarAndStaysWithinTheRoundingOfX) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (DType t : {DType::kQ4_1, DType::kQ8_0}) {
    for (int64_t nb : {1, 7, 18, 48}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(t) << " " << nb << " blocks");
      const std::vector<uint8_t> row = RandomRow(t, nb, rng);
      std::vector<float> x(nb * 32), w(nb * 32);
      for (float& v : x) v = n(rng);
      std::vector<Q8Block> q(nb);
      QuantizeQ8(x.data(), nb * 32, q.data());
      const float fast = DotQ8(t, row.data(), q.data(), nb);
      const float scalar = DotQ8Scalar(t, row.data(), q.data(), nb);
      DequantizeRow(t, row.data(), w.data(), nb * 32);
      double abs_sum = 0, xq_exact = 0, bound = 0;
      for (int64_t i = 0; i < nb * 32; ++i) {
        abs_sum += std::fabs(double{w[i]} * x[i]);
        const Q8Block& blk = q[i / 32];
        xq_exact += double{w[i]} * blk.q[i % 32] * blk.d;
        bound += std::fabs(w[i]) * 0.5 * blk.d;  // |x - d q| <= d / 2
      }
      EXPECT_NEAR(fast, scalar, 1e-5 * abs_sum + 1e-6);
      EXPECT_NEAR(scalar, xq_exact, 1e-5 * abs_sum + 1e-6);
      const float reference = DotRow(t, row.data(), x.data(), nb * 32);
      EXPECT_LE(std::fabs(fast - reference), bound * 1.001 + 1e-5 * abs_sum);
      EXPECT_GT(std::fabs(fast - reference), 0.0f) << "the 8-bit rounding should show";
    }
  }
}

TEST(Q8Dot, MatMulTakesItOnlyWhereAsked) {
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t out = 70, in = 576, nb = in / 32;
  std::vector<uint8_t> rows;
  for (int64_t r = 0; r < out; ++r) {
    const std::vector<uint8_t> row = RandomRow(DType::kQ4_1, nb, rng);
    rows.insert(rows.end(), row.begin(), row.end());
  }
  LinearWeight w;
  w.dtype = DType::kQ4_1;
  w.out_features = out;
  w.in_features = in;
  w.row_bytes = nb * 20;
  w.data = rows.data();
  std::vector<float> x(3 * in), exact(3 * out), fast(3 * out);
  for (float& v : x) v = n(rng);
  ThreadPool pool(2);
  MatMul(w, x.data(), 3, exact.data(), pool);
  MatMul(w, x.data(), 3, fast.data(), pool, {.q8_activations = true});
  std::vector<Q8Block> q(nb);
  for (int64_t m = 0; m < 3; ++m) {
    QuantizeQ8(x.data() + m * in, in, q.data());
    for (int64_t r = 0; r < out; ++r) {
      EXPECT_EQ(exact[m * out + r], DotRow(DType::kQ4_1, w.row(r), x.data() + m * in, in));
      EXPECT_EQ(fast[m * out + r], DotQ8(DType::kQ4_1, w.row(r), q.data(), nb));
    }
  }
  EXPECT_NE(exact, fast);
  // The multi-row kernels (AVX2, and AVX-VNNI where the CPU has it): each row the same bits as
  // alone (5 rows: one group of 4 and a tail).
  std::vector<Q8Isa> isas = {Q8Isa::kAvx2};
  if (CpuHasAvxVnni()) isas.push_back(Q8Isa::kAvxVnni);
  std::printf("q8 multi-row kernels tested: %zu (AVX-VNNI %s)\n", isas.size(),
              CpuHasAvxVnni() ? "yes" : "not on this CPU");
  for (Q8Isa isa : isas) {
    float five[5];
    DotQ8Rows(DType::kQ4_1, w.row(3), w.row_bytes, 5, q.data(), nb, five, isa);
    for (int r = 0; r < 5; ++r) {
      EXPECT_EQ(five[r], DotQ8(DType::kQ4_1, w.row(3 + r), q.data(), nb)) << r;
    }
  }
  // Q8_0's 4-row kernel the same way.
  std::vector<uint8_t> q8_rows;
  for (int r = 0; r < 5; ++r) {
    const std::vector<uint8_t> row = RandomRow(DType::kQ8_0, nb, rng);
    q8_rows.insert(q8_rows.end(), row.begin(), row.end());
  }
  float five8[5];
  DotQ8Rows(DType::kQ8_0, q8_rows.data(), nb * 34, 5, q.data(), nb, five8);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(five8[r], DotQ8(DType::kQ8_0, q8_rows.data() + r * nb * 34, q.data(), nb)) << r;
  }
}

}  // namespace
}  // namespace dq::cpu
