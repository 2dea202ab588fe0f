// Tests of the "fp8" weight codec: round trips, analytic error bounds, validation, w8a8
// activations, and a known-answer check against compressed-tensors
// (tests/fixtures/quant/make_nvfp4_fp8_fixtures.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_checkpoint.h"
#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

using ::testing::HasSubstr;

const WeightCodec* Codec() {
  auto c = FindWeightCodec("fp8");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::vector<float> Dequantize(const QuantizedView& q) {
  std::vector<float> out(q.out_features * q.in_features);
  for (int64_t r = 0; r < q.out_features; ++r) {
    Codec()->DequantizeRow(q, r, out.data() + r * q.in_features);
  }
  return out;
}

float ScaleOf(const QuantizedView& q, int64_t r) {
  float s;
  std::memcpy(&s, q.parts.at("weight_scale").data + 4 * r, 4);
  return s;
}

// Normal rows, plus heavy-tailed rows (normal / |normal|^0.8: rare large outliers).
std::vector<float> RandomMatrix(int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> w(out * in);
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      const float x = n(rng);
      w[r * in + i] = r % 2 ? x / std::pow(std::fabs(n(rng)) + 1e-3f, 0.8f) : 0.02f * x;
    }
  }
  return w;
}

// |w - w'| <= 2^-4 |w| when w/s is an E4M3 normal (3 mantissa bits: half an ulp is at most
// 2^-4 of the value), else <= 2^-10 s (half the subnormal step 2^-9); plus fp32 rounding of the
// division and the product (a few 2^-24 relative).
void ExpectWithinBound(float w, float wq, float s) {
  const float bound = std::fabs(w / s) >= 0x1p-6f ? 0x1p-4f * std::fabs(w) : 0x1p-10f * s;
  EXPECT_LE(std::fabs(w - wq), bound * (1 + 1e-6f) + 1e-6f * std::fabs(w)) << w << " " << s;
}

TEST(Fp8CodecTest, RoundTripWithinAnalyticBound) {
  const int64_t out = 16, in = 96;
  const std::vector<float> w = RandomMatrix(out, in, 11);
  auto q = Codec()->Quantize(w.data(), out, in, {});
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(Codec()->Validate(q->view, "layer").ok());
  const std::vector<float> d = Dequantize(q->view);
  const uint8_t* codes = q->view.parts.at("weight").data;
  for (int64_t r = 0; r < out; ++r) {
    float amax = 0;
    for (int64_t i = 0; i < in; ++i) amax = std::max(amax, std::fabs(w[r * in + i]));
    EXPECT_EQ(ScaleOf(q->view, r), amax / 448.0f);
    for (int64_t i = 0; i < in; ++i) {
      const int64_t k = r * in + i;
      EXPECT_EQ(d[k], E4M3ToFloat(codes[k]) * ScaleOf(q->view, r));
      ExpectWithinBound(w[k], d[k], ScaleOf(q->view, r));
    }
  }
}

TEST(Fp8CodecTest, ZeroRowAndNonFiniteWeights) {
  // Row 0 is all zero: compressed-tensors replaces the zero scale by fp32 epsilon (2^-23).
  // -0.0 keeps its sign (0x80) as a float8 cast does. Row 1: finite amax 3 -> s = 3/448;
  // +inf saturates to code 0x7E (448 s = 3), -inf to 0xFE, NaN is stored as 0.
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> w = {0, -0.0f, 0, 0, inf, -inf, std::nanf(""), 3.0f};
  auto q = Codec()->Quantize(w.data(), 2, 4, {});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(ScaleOf(q->view, 0), FLT_EPSILON);
  EXPECT_EQ(ScaleOf(q->view, 1), 3.0f / 448.0f);
  const uint8_t* c = q->view.parts.at("weight").data;
  EXPECT_THAT(std::vector<int>(c, c + 8),
              ::testing::ElementsAre(0, 0x80, 0, 0, 0x7E, 0xFE, 0, 0x7E));
  const std::vector<float> d = Dequantize(q->view);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
  EXPECT_EQ(d[4], 448.0f * (3.0f / 448.0f));
  EXPECT_EQ(d[5], -d[4]);
}

TEST(Fp8CodecTest, ReadsBf16AndFlatScales) {
  const std::vector<float> w = RandomMatrix(4, 32, 3);
  auto q = Codec()->Quantize(w.data(), 4, 32, {});
  ASSERT_TRUE(q.ok());
  QuantizedView v = q->view;
  std::vector<uint16_t> bf(4);
  for (int r = 0; r < 4; ++r) bf[r] = F32ToBF16(ScaleOf(v, r));
  v.parts["weight_scale"] = {DType::kBF16, {4}, reinterpret_cast<const uint8_t*>(bf.data()), 8};
  ASSERT_TRUE(Codec()->Validate(v, "x").ok()) << Codec()->Validate(v, "x");
  std::vector<float> row(32);
  Codec()->DequantizeRow(v, 2, row.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(row[i], E4M3ToFloat(v.parts["weight"].data[64 + i]) * BF16ToF32(bf[2]));
  }
}

TEST(Fp8CodecTest, ValidateNamesTensorAndComponent) {
  const std::vector<float> w = RandomMatrix(4, 32, 5);
  auto q = Codec()->Quantize(w.data(), 4, 32, {});
  ASSERT_TRUE(q.ok());
  const std::string name = "model.layers.3.mlp.up_proj";
  auto expect_error = [&](QuantizedView v, const std::string& part) {
    absl::Status s = Codec()->Validate(v, name);
    EXPECT_FALSE(s.ok());
    EXPECT_THAT(std::string(s.message()), HasSubstr(name));
    EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  };
  QuantizedView v = q->view;
  v.parts.erase("weight");
  expect_error(v, "'weight'");
  v = q->view;
  v.parts.erase("weight_scale");
  expect_error(v, "'weight_scale'");
  v = q->view;
  v.parts["weight"].dtype = DType::kU8;
  expect_error(v, "'weight'");
  v = q->view;
  v.parts["weight"].shape = {32, 4};
  expect_error(v, "'weight'");
  v = q->view;
  v.parts["weight_scale"].shape = {4, 2};
  expect_error(v, "'weight_scale'");
  v = q->view;
  v.parts["weight_scale"].dtype = DType::kI32;
  expect_error(v, "'weight_scale'");
  v = q->view;
  v.in_features = 0;
  expect_error(v, "[4, 0]");
}

TEST(Fp8CodecTest, W8A8ActivationsIdempotentAndBounded) {
  EXPECT_TRUE(Codec()->Supports(ComputeMode::kW8A8));
  EXPECT_TRUE(Codec()->Supports(ComputeMode::kWeightOnly));
  EXPECT_FALSE(Codec()->Supports(ComputeMode::kW4A4));
  const std::vector<float> x0 = RandomMatrix(2, 256, 9);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> x(x0.begin() + r * 256, x0.begin() + (r + 1) * 256);
    std::vector<float> once = x;
    Codec()->QuantizeActivations(ComputeMode::kW8A8, /*act_global_scale=*/123.0f, once.data(), 256);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (int i = 0; i < 256; ++i) ExpectWithinBound(x[i], once[i], amax / 448.0f);
    // The second pass picks the same codes; its scale fl(fl(448 s) / 448) can differ from s in
    // the last bit, so values agree to one fp32 ulp of the scale.
    std::vector<float> twice = once;
    Codec()->QuantizeActivations(ComputeMode::kW8A8, 0.0f, twice.data(), 256);
    for (int i = 0; i < 256; ++i) {
      EXPECT_NEAR(twice[i], once[i], 0x1p-22f * std::fabs(once[i])) << i;
    }
    std::vector<float> same = x;
    Codec()->QuantizeActivations(ComputeMode::kWeightOnly, 1.0f, same.data(), 256);
    EXPECT_EQ(same, x);
  }
}

TEST(Fp8CodecTest, BitsPerWeight) {
  EXPECT_DOUBLE_EQ(Codec()->BitsPerWeight(4096, 4096, 0), 8.0 + 32.0 / 4096);
  EXPECT_FALSE(Codec()->Quantize(nullptr, 0, 16, {}).ok());
}

// --- Known answers from compressed-tensors ---------------------------------------------------

class Fp8FixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ck = SafetensorsCheckpoint::Open(std::string(DQ_SOURCE_DIR) +
                                          "/tests/fixtures/quant/nvfp4_fp8_fixture.safetensors");
    ASSERT_TRUE(ck.ok()) << ck.status();
    ck_ = std::move(*ck);
  }
  const TensorView& T(const std::string& name) {
    const TensorView* t = ck_->Find(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  std::vector<float> Floats(const std::string& name) {
    const TensorView& t = T(name);
    std::vector<float> v(t.numel());
    std::memcpy(v.data(), t.data, t.nbytes);
    return v;
  }
  static ComponentView Part(const TensorView& t) {
    return ComponentView{t.dtype, t.shape, t.data, t.nbytes};
  }
  std::unique_ptr<SafetensorsCheckpoint> ck_;
};

TEST_F(Fp8FixtureTest, QuantizeMatchesCompressedTensorsBytes) {
  const std::vector<float> w = Floats("input.weight");
  auto q = Codec()->Quantize(w.data(), 8, 64, {});
  ASSERT_TRUE(q.ok());
  const TensorView& want_q = T("fp8.weight");
  const TensorView& want_s = T("fp8.weight_scale");
  EXPECT_EQ(want_q.dtype, DType::kF8E4M3);
  ASSERT_EQ(want_q.nbytes, 8 * 64);
  for (int64_t k = 0; k < 8 * 64; ++k) {
    EXPECT_EQ(q->view.parts["weight"].data[k], want_q.data[k]) << "element " << k;
  }
  EXPECT_EQ(std::memcmp(q->view.parts["weight_scale"].data, want_s.data, 8 * 4), 0);
  EXPECT_EQ(q->view.parts["weight_scale"].shape, want_s.shape);
}

TEST_F(Fp8FixtureTest, DequantizeMatchesCompressedTensors) {
  QuantizedView v;
  v.scheme = "fp8";
  v.out_features = 8;
  v.in_features = 64;
  v.parts["weight"] = Part(T("fp8.weight"));
  v.parts["weight_scale"] = Part(T("fp8.weight_scale"));
  ASSERT_TRUE(Codec()->Validate(v, "fixture").ok());
  const std::vector<float> want = Floats("fp8.dequant");
  const std::vector<float> got = Dequantize(v);
  for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << k;
}

TEST_F(Fp8FixtureTest, W8A8MatchesCompressedTensors) {
  const std::vector<float> x = Floats("act.input");
  const std::vector<float> want = Floats("act.w8a8");
  for (int r = 0; r < 4; ++r) {
    std::vector<float> row(x.begin() + r * 64, x.begin() + (r + 1) * 64);
    Codec()->QuantizeActivations(ComputeMode::kW8A8, 0.0f, row.data(), 64);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(row[i], want[r * 64 + i]) << r << "," << i;
  }
}

}  // namespace
}  // namespace dq
