// The Q5, k-quant and i-quant ggml block types: bit-exact against gguf-py (fixture written by
// tests/fixtures/quant/make_ggml_fixtures.py), fused dot vs dequantize, and throughput.
#include "engine/quant/ggml_kquants.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/gguf_file.h"
#include "engine/quant/ggml_blocks.h"

namespace dq {
namespace {

const DType kNewTypes[] = {DType::kQ5_0,    DType::kQ5_1,   DType::kQ2_K,   DType::kQ3_K,
                           DType::kQ4_K,    DType::kQ5_K,   DType::kQ6_K,   DType::kIQ2_XXS,
                           DType::kIQ3_XXS, DType::kIQ4_NL, DType::kIQ4_XS, DType::kIQ2_XS,
                           DType::kIQ2_S,   DType::kIQ3_S,  DType::kIQ1_S,  DType::kIQ1_M};

struct FieldOffsets {
  std::vector<int> scales;  // fp16 d
  std::vector<int> mins;    // fp16 dmin / m
};

// Where each block keeps its fp16 fields (the rest of a block may be any bytes).
FieldOffsets Fp16Fields(DType t) {
  switch (t) {
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
      return {{0}, {2}};
    case DType::kQ2_K:
      return {{80}, {82}};
    case DType::kQ3_K:
      return {{108}, {}};
    case DType::kQ6_K:
      return {{208}, {}};
    case DType::kIQ1_M:
      return {{}, {}};  // its d is spread over the scale words' top nibbles (RandomRow)
    default:
      return {{0}, {}};
  }
}

// Random bytes for `n` values of `t`, with finite fp16 scales (~N(0, 0.05)) and mins.
std::vector<uint8_t> RandomRow(DType t, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(DTypeRowBytes(t, n));
  for (auto& b : row) b = static_cast<uint8_t>(rng());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const FieldOffsets f = Fp16Fields(t);
  const int64_t bb = DTypeBlockBytes(t);
  for (int64_t b = 0; b < n / DTypeBlockElems(t); ++b) {
    for (int off : f.scales) {
      const uint16_t h = F32ToF16(normal(rng) * 0.05f);
      std::memcpy(&row[b * bb + off], &h, 2);
    }
    for (int off : f.mins) {
      const uint16_t h = F32ToF16(normal(rng) * 0.1f);
      std::memcpy(&row[b * bb + off], &h, 2);
    }
    if (t == DType::kIQ1_M) {  // word w of the scales at 48 holds bits 4w..4w+3 of d on top
      const uint16_t h = F32ToF16(normal(rng) * 0.05f);
      for (int w = 0; w < 4; ++w) {
        uint8_t* top = &row[b * bb + 48 + 2 * w + 1];
        *top = static_cast<uint8_t>((*top & 0x0F) | ((h >> (4 * w)) & 0xF) << 4);
      }
    }
  }
  return row;
}

// The first index where `got` and `want` differ in any bit (so -0.0 != 0.0), or -1.
int64_t FirstBitMismatch(const float* got, const float* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) return i;
  }
  return -1;
}

TEST(GgmlKquants, BlockSizesMatchGgml) {
  const std::map<DType, std::pair<int64_t, int64_t>> ggml = {
      {DType::kQ5_0, {32, 22}},   {DType::kQ5_1, {32, 24}},     {DType::kQ2_K, {256, 84}},
      {DType::kQ3_K, {256, 110}}, {DType::kQ4_K, {256, 144}},   {DType::kQ5_K, {256, 176}},
      {DType::kQ6_K, {256, 210}}, {DType::kIQ2_XXS, {256, 66}}, {DType::kIQ3_XXS, {256, 98}},
      {DType::kIQ4_NL, {32, 18}}, {DType::kIQ4_XS, {256, 136}}, {DType::kIQ2_XS, {256, 74}},
      {DType::kIQ2_S, {256, 82}}, {DType::kIQ3_S, {256, 110}},  {DType::kIQ1_S, {256, 50}},
      {DType::kIQ1_M, {256, 56}}};
  std::set<std::string> names;
  for (DType t : kNewTypes) {
    EXPECT_EQ(DTypeBlockElems(t), ggml.at(t).first) << DTypeName(t);
    EXPECT_EQ(DTypeBlockBytes(t), ggml.at(t).second) << DTypeName(t);
    names.insert(DTypeName(t));
  }
  EXPECT_EQ(names, (std::set<std::string>{"q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                                          "iq2_xxs", "iq3_xxs", "iq4_nl", "iq4_xs", "iq2_xs",
                                          "iq2_s", "iq3_s", "iq1_s", "iq1_m"}));
  EXPECT_EQ(DTypeRowBytes(DType::kQ6_K, 1536), 6 * 210);
}

// A GGUF written by gguf-py with every type opens in GgufFile, and both DequantizeRow and the
// portable reference reproduce gguf-py's dequantization bit for bit, row by row.
TEST(GgufGgmlTypes, GgufPyFileDequantizesBitExact) {
  auto f = GgufFile::Open(std::string(DQ_SOURCE_DIR) + "/tests/fixtures/quant/ggml_types.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::map<std::string, DType> by_prefix = {
      {"q5_0", DType::kQ5_0},     {"q5_1", DType::kQ5_1},       {"q2_k", DType::kQ2_K},
      {"q3_k", DType::kQ3_K},     {"q4_k", DType::kQ4_K},       {"q5_k", DType::kQ5_K},
      {"q6_k", DType::kQ6_K},     {"iq2_xxs", DType::kIQ2_XXS}, {"iq3_xxs", DType::kIQ3_XXS},
      {"iq4_nl", DType::kIQ4_NL}, {"iq4_xs", DType::kIQ4_XS},   {"iq2_xs", DType::kIQ2_XS},
      {"iq2_s", DType::kIQ2_S},   {"iq3_s", DType::kIQ3_S},     {"iq1_s", DType::kIQ1_S},
      {"iq1_m", DType::kIQ1_M}};
  std::set<DType> seen;
  for (const TensorView& t : (*f)->tensors()) {
    if (t.name.ends_with(".expected")) continue;
    const DType want_type = by_prefix.at(t.name.substr(0, t.name.find('.')));
    ASSERT_EQ(t.dtype, want_type) << t.name;
    const TensorView* e = (*f)->Find(t.name + ".expected");
    ASSERT_NE(e, nullptr) << t.name;
    ASSERT_EQ(e->dtype, DType::kF32);
    ASSERT_EQ(e->shape, t.shape) << t.name;
    seen.insert(t.dtype);
    const int64_t cols = t.cols(), row_bytes = DTypeRowBytes(t.dtype, cols);
    std::vector<float> got(cols), ref(cols);
    for (int64_t r = 0; r < t.rows(); ++r) {
      const float* want = reinterpret_cast<const float*>(e->data) + r * cols;
      DequantizeRow(t.dtype, t.data + r * row_bytes, got.data(), cols);
      int64_t bad = FirstBitMismatch(got.data(), want, cols);
      EXPECT_EQ(bad, -1) << t.name << " row " << r << " col " << bad << ": got "
                         << got[bad < 0 ? 0 : bad] << " want " << want[bad < 0 ? 0 : bad];
      ASSERT_TRUE(ggml::DequantizeBlocksRef(t.dtype, t.data + r * row_bytes, ref.data(),
                                            cols / DTypeBlockElems(t.dtype)));
      bad = FirstBitMismatch(ref.data(), want, cols);
      EXPECT_EQ(bad, -1) << t.name << " (reference) row " << r << " col " << bad;
    }
  }
  EXPECT_EQ(seen.size(), std::size(kNewTypes));
}

// On much more random data than the fixture holds, the vector dequantization equals the
// portable reference (which the fixture ties to gguf-py), whole rows and block by block.
TEST(GgmlKquants, DequantizeRowMatchesReferenceOnRandomBlocks) {
  std::mt19937 rng(17);
  for (DType t : kNewTypes) {
    const int64_t blk = DTypeBlockElems(t), n = 64 * blk;
    const std::vector<uint8_t> row = RandomRow(t, n, rng);
    std::vector<float> got(n), ref(n), one(blk);
    DequantizeRow(t, row.data(), got.data(), n);
    ASSERT_TRUE(ggml::DequantizeBlocksRef(t, row.data(), ref.data(), n / blk));
    EXPECT_EQ(FirstBitMismatch(got.data(), ref.data(), n), -1) << DTypeName(t);
    for (int64_t b = 0; b < n / blk; b += 7) {
      DequantizeRow(t, row.data() + b * DTypeBlockBytes(t), one.data(), blk);
      EXPECT_EQ(FirstBitMismatch(one.data(), ref.data() + b * blk, blk), -1) << DTypeName(t);
    }
  }
}

TEST(GgmlKquants, DotRowAgreesWithDequantize) {
  std::mt19937 rng(23);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (DType t : kNewTypes) {
    std::vector<int64_t> lengths = {256, 512, 1536, 4096, 11008};
    if (DTypeBlockElems(t) == 32) lengths.insert(lengths.end(), {32, 64, 96, 576});
    for (int64_t n : lengths) {
      const std::vector<uint8_t> row = RandomRow(t, n, rng);
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

}  // namespace
}  // namespace dq
