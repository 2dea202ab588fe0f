#include "engine/quant/ggml_blocks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace dq {
namespace {

void PutF16(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// Random bytes for a row of `n` values of type `t`, with finite, sensible fp16 scales.
std::vector<uint8_t> RandomRow(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(DTypeRowBytes(t, n));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& b : row) b = static_cast<uint8_t>(byte(rng));
  const int64_t bb = DTypeBlockBytes(t);
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        const float v = normal(rng);
        std::memcpy(&row[4 * i], &v, 4);
      }
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) PutF16(&row[2 * i], normal(rng));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = F32ToBF16(normal(rng));
        std::memcpy(&row[2 * i], &b, 2);
      }
      break;
    case DType::kQ4_0:
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b) PutF16(&row[b * bb], normal(rng) * 0.05f);
      break;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b) {
        PutF16(&row[b * bb], std::fabs(normal(rng)) * 0.05f);
        PutF16(&row[b * bb + 2], normal(rng) * 0.3f);
      }
      break;
    default:
      break;
  }
  return row;
}

// The documented block layouts, written independently of the library (volatile keeps the
// compiler from fusing the Q4_1 multiply-add, which ggml rounds twice).
float RefValue(DType t, const uint8_t* row, int64_t i) {
  const int64_t bb = DTypeBlockBytes(t);
  const uint8_t* blk = row + (i / 32) * bb;
  const int j = static_cast<int>(i % 32);
  uint16_t h0, h1;
  std::memcpy(&h0, blk, 2);
  std::memcpy(&h1, blk + 2, 2);
  const int nib_byte = j < 16 ? j : j - 16;
  switch (t) {
    case DType::kQ4_0: {
      const int q = j < 16 ? (blk[2 + nib_byte] & 15) : (blk[2 + nib_byte] >> 4);
      return static_cast<float>(q - 8) * F16ToF32(h0);
    }
    case DType::kQ4_1: {
      const int q = j < 16 ? (blk[4 + nib_byte] & 15) : (blk[4 + nib_byte] >> 4);
      volatile float p = static_cast<float>(q) * F16ToF32(h0);
      return p + F16ToF32(h1);
    }
    case DType::kQ8_0:
      return static_cast<float>(static_cast<int8_t>(blk[2 + j])) * F16ToF32(h0);
    default: {
      std::vector<float> one(1);
      DequantizeRow(t, row + i * DTypeBlockBytes(t), one.data(), 1);
      return one[0];
    }
  }
}

TEST(GgmlBlocks, Q4_0NibbleOrder) {
  uint8_t blk[18];
  PutF16(blk, 0.5f);
  for (int j = 0; j < 16; ++j) blk[2 + j] = static_cast<uint8_t>((15 - j) << 4 | j);
  float out[32];
  DequantizeRow(DType::kQ4_0, blk, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], (j - 8) * 0.5f) << j;            // low nibble: element j
    EXPECT_EQ(out[j + 16], (7 - j) * 0.5f) << j + 16;  // high nibble: element j + 16
  }
}

TEST(GgmlBlocks, Q4_1AndQ8_0Layouts) {
  uint8_t q41[20];
  PutF16(q41, 2.0f);
  PutF16(q41 + 2, -1.0f);
  for (int j = 0; j < 16; ++j) q41[4 + j] = static_cast<uint8_t>(3 << 4 | j);
  float out[32];
  DequantizeRow(DType::kQ4_1, q41, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], j * 2.0f - 1.0f);
    EXPECT_EQ(out[j + 16], 5.0f);
  }
  uint8_t q80[34];
  PutF16(q80, 0.25f);
  for (int j = 0; j < 32; ++j) q80[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  DequantizeRow(DType::kQ8_0, q80, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j * 8 - 128) * 0.25f);
}

TEST(GgmlBlocks, DequantizeMatchesReferenceBitExact) {
  std::mt19937 rng(7);
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
    for (int64_t n : {32, 64, 96, 1024}) {
      const std::vector<uint8_t> row = RandomRow(t, n, rng);
      std::vector<float> out(n);
      DequantizeRow(t, row.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float ref = RefValue(t, row.data(), i);
        ASSERT_EQ(std::memcmp(&out[i], &ref, 4), 0)
            << DTypeName(t) << " n=" << n << " i=" << i << " got " << out[i] << " want " << ref;
      }
    }
  }
}

TEST(GgmlBlocks, ScalarTypesHandleOddLengthsAndI32) {
  std::mt19937 rng(3);
  for (DType t : {DType::kF16, DType::kBF16}) {
    const std::vector<uint8_t> row = RandomRow(t, 13, rng);
    std::vector<float> all(13), one(1);
    DequantizeRow(t, row.data(), all.data(), 13);
    for (int i = 0; i < 13; ++i) {
      DequantizeRow(t, row.data() + 2 * i, one.data(), 1);
      EXPECT_EQ(all[i], one[0]);
    }
  }
  const int32_t ints[3] = {-7, 0, 1 << 20};
  float f[3];
  DequantizeRow(DType::kI32, reinterpret_cast<const uint8_t*>(ints), f, 3);
  EXPECT_EQ(f[0], -7.0f);
  EXPECT_EQ(f[2], 1048576.0f);
}

TEST(GgmlBlocks, DotRowAgreesWithDequantize) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,
                  DType::kI32}) {
    std::vector<int64_t> lengths = {32, 64, 96, 576, 1536, 4096};
    if (DTypeBlockElems(t) == 1) lengths.insert(lengths.end(), {1, 7, 9, 33, 100});
    for (int64_t n : lengths) {
      std::vector<uint8_t> row = RandomRow(t, n, rng);
      if (t == DType::kI32) {
        for (int64_t i = 0; i < n; ++i) {
          const int32_t v = static_cast<int32_t>(rng() % 2001) - 1000;
          std::memcpy(&row[4 * i], &v, 4);
        }
      }
      std::vector<float> x(n), w(n);
      for (float& v : x) v = normal(rng);
      DequantizeRow(t, row.data(), w.data(), n);
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<double>(w[i]) * x[i];
        mag += std::fabs(static_cast<double>(w[i]) * x[i]);
      }
      const float got = DotRow(t, row.data(), x.data(), n);
      EXPECT_NEAR(got, ref, 1e-5 * mag + 1e-30) << DTypeName(t) << " n=" << n;
    }
  }
}

// DotRows must give exactly DotRow's bits for every row (same per-row summation order),
// whatever the row count (exercising the 4-, 2- and 1-row groups) and with padded row strides.
TEST(GgmlBlocks, DotRowsBitIdenticalToDotRow) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t :
       {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {32, 64, 576, 1536}) {
      for (int nrows : {1, 2, 3, 4, 5, 7, 8, 13, 32}) {
        for (int64_t pad : {0, 6}) {
          const int64_t row_bytes = DTypeRowBytes(t, n) + pad;
          std::vector<uint8_t> rows(row_bytes * nrows);
          for (int r = 0; r < nrows; ++r) {
            const std::vector<uint8_t> row = RandomRow(t, n, rng);
            std::memcpy(&rows[r * row_bytes], row.data(), row.size());
          }
          std::vector<float> x(n);
          for (float& v : x) v = normal(rng);
          std::vector<float> got(nrows, -1.0f);
          DotRows(t, rows.data(), row_bytes, nrows, x.data(), n, got.data());
          for (int r = 0; r < nrows; ++r) {
            const float want = DotRow(t, &rows[r * row_bytes], x.data(), n);
            uint32_t gb, wb;
            std::memcpy(&gb, &got[r], 4);
            std::memcpy(&wb, &want, 4);
            EXPECT_EQ(gb, wb) << DTypeName(t) << " n=" << n << " nrows=" << nrows << " r=" << r
                              << " pad=" << pad << " got=" << got[r] << " want=" << want;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dq
