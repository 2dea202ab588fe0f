#include "engine/quant/lut_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/int_codec.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const WeightCodec& Codec(int bits) { return *LutCodec(bits); }

std::vector<float> Dequant(const WeightCodec& c, const QuantizedView& q) {
  std::vector<float> out(q.out_features * q.in_features);
  for (int64_t r = 0; r < q.out_features; ++r) c.DequantizeRow(q, r, &out[r * q.in_features]);
  return out;
}

std::vector<uint8_t> Codes(const QuantizedView& q, int bits) {
  const int64_t n = q.out_features * q.in_features;
  std::vector<uint8_t> codes(n);
  UnpackBits(q.parts.at("weight_packed").data, n, bits, codes.data());  // rows are whole bytes
  return codes;
}

float Global(const QuantizedView& q) {
  const ComponentView& c = q.parts.at("weight_global_scale");
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(c.nbytes, 4);
  float g;
  std::memcpy(&g, c.data, sizeof g);
  return g;
}

TEST(LutCodec, GridPointsReproduceExactlyWithSignedScales) {
  for (int bits : {2, 3}) {
    const int n = 1 << bits;
    const float* L = LutLevels(bits);
    // Row 0: levels * 0.5 (max |w| = +3, the tensor's amax -> G = 2688 / 3 = 896, block scale
    // byte 896 * 0.5 = +448, step 448 / 896 = 0.5); row 1: levels * -0.25 (max |w| is -1.5 ->
    // byte -224, sign bit set, step -0.25). Codes cycle through every level.
    std::vector<float> w(2 * 32);
    for (int j = 0; j < 32; ++j) {
      w[j] = L[j % n] * 0.5f;
      w[32 + j] = L[(j + 1) % n] * -0.25f;
    }
    auto q = Codec(bits).Quantize(w.data(), 2, 32, {});
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(Global(q->view), 896.0f);
    const uint8_t* sc = q->view.parts.at("weight_scale").data;
    EXPECT_EQ(sc[0], FloatToE4M3(448.0f));
    EXPECT_EQ(sc[2], FloatToE4M3(-224.0f));
    EXPECT_EQ(sc[2] & 0x80, 0x80);
    const std::vector<uint8_t> codes = Codes(q->view, bits);
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(codes[j], j % n);
      EXPECT_EQ(codes[32 + j], (j + 1) % n);
    }
    EXPECT_EQ(Dequant(Codec(bits), q->view), w);
  }
}

TEST(LutCodec, MidpointTiesGoToTheLowerLevel) {
  for (int bits : {2, 3}) {
    const float* L = LutLevels(bits);
    for (int i = 0; i + 1 < (1 << bits); ++i) {
      const float mid = 0.5f * (L[i] + L[i + 1]);
      EXPECT_EQ(LutNearestCode(mid, bits), i);
      EXPECT_EQ(LutNearestCode(std::nextafter(mid, 100.0f), bits), i + 1);
      EXPECT_EQ(LutNearestCode(L[i], bits), i);
    }
    EXPECT_EQ(LutNearestCode(-100.0f, bits), 0);
    EXPECT_EQ(LutNearestCode(100.0f, bits), (1 << bits) - 1);
  }
  // Through the codec: block max 6 with G = 2688 / 6 = 448 gives scale byte 448 and step
  // exactly 1; an element exactly on the 0 / 1.2204 midpoint.
  ASSERT_EQ(LutGlobalScale(6.0f), 448.0f);
  float block[16] = {6.0f};
  block[1] = 0.5f * (0.0f + 1.2204f);
  uint8_t codes[16];
  EXPECT_EQ(QuantizeLutBlock(block, 3, 448.0f, codes), FloatToE4M3(448.0f));
  EXPECT_EQ(codes[0], 7);
  EXPECT_EQ(codes[1], 3);
}

TEST(LutCodec, ZeroAndTinyBlocksDequantizeToZero) {
  for (int bits : {2, 3}) {
    // Block 0 zeros; block 1 so small next to block 3's max (10) that G * |a| / 6 < 2^-10;
    // block 2 a lone -0; block 3 sets the tensor's amax.
    std::vector<float> w(64, 0.0f);
    for (int j = 16; j < 32; ++j) w[j] = (j % 2 ? 1e-5f : -5e-6f);
    w[32] = -0.0f;
    w[50] = 10.0f;
    auto q = Codec(bits).Quantize(w.data(), 1, 64, {});
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_EQ(Global(q->view), LutGlobalScale(10.0f));
    EXPECT_LT(LutGlobalScale(10.0f) * 1e-5f / 6.0f, std::ldexp(1.0f, -10));
    for (int b = 0; b < 3; ++b) EXPECT_EQ(q->view.parts.at("weight_scale").data[b], 0x00);
    const std::vector<uint8_t> codes = Codes(q->view, bits);
    for (int i = 0; i < 48; ++i) EXPECT_EQ(LutLevels(bits)[codes[i]], 0.0f);
    const std::vector<float> d = Dequant(Codec(bits), q->view);
    for (int i = 0; i < 48; ++i) EXPECT_EQ(d[i], 0.0f) << i;
    EXPECT_NEAR(d[50], 10.0f, 1e-5f);  // step 448 / G, about 10 / 6

    // An all-zero tensor: G would be infinite and is stored as 1; everything decodes to +0.
    std::vector<float> z(32, 0.0f);
    z[3] = -0.0f;
    q = Codec(bits).Quantize(z.data(), 1, 32, {});
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_TRUE(Codec(bits).Validate(q->view, "z").ok());
    EXPECT_EQ(Global(q->view), 1.0f);
    for (float x : Dequant(Codec(bits), q->view)) EXPECT_EQ(x, 0.0f);
  }
}

// The largest error relative to the block's max |a| when its scale is an E4M3 normal (the
// rounding factor r then lies in [16/17, 16/15]): the header's 0.2651 (lut3) and 0.4295 (lut2).
float RelativeBound(int bits) {
  const float* L = LutLevels(bits);
  float half_gap = 0.0f;
  for (int i = 0; i + 1 < (1 << bits); ++i) half_gap = std::max(half_gap, (L[i + 1] - L[i]) / 2);
  return std::max({half_gap / (6.0f * 16 / 17), 1.0f + L[0] / (6.0f * 16 / 15), 1.0f / 16});
}

// The header's bound: |w - w'| <= |e| * max(gap / 2, L[0] + 6r, 6r - 6), r = |a / 6| / |e|,
// e = s / G. Rows 0-3 hold ordinary weights of scale `magnitude` (row 0 also the tensor's
// amax, a negative -30 * magnitude), whose block scales must all be E4M3 normals whatever the
// magnitude; row 4 is 1e-4 as large (subnormal scales), row 5 1e-7 (scales underflow to 0).
void CheckRandom(int bits, float magnitude, uint32_t seed) {
  const int64_t out = 6, in = 160;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, magnitude);
  std::vector<float> w(out * in);
  for (float& x : w) x = normal(rng);
  for (int64_t c = 0; c < in; ++c) w[4 * in + c] *= 1e-4f, w[5 * in + c] *= 1e-7f;
  w[5] = -30.0f * magnitude;
  auto q = Codec(bits).Quantize(w.data(), out, in, {});
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(Codec(bits).Validate(q->view, "t").ok());
  const float G = Global(q->view);
  EXPECT_EQ(G, LutGlobalScale(30.0f * magnitude));
  const std::vector<float> d = Dequant(Codec(bits), q->view);
  const std::vector<uint8_t> codes = Codes(q->view, bits);
  const float* L = LutLevels(bits);
  float half_gap = 0.0f;
  for (int i = 0; i + 1 < (1 << bits); ++i) half_gap = std::max(half_gap, (L[i + 1] - L[i]) / 2);
  const float rel_bound = RelativeBound(bits);
  int normal_blocks = 0, subnormal_blocks = 0, zero_blocks = 0;
  for (int64_t blk = 0; blk < out * in / 16; ++blk) {
    const int64_t row = blk * 16 / in;
    const float s = E4M3ToFloat(q->view.parts.at("weight_scale").data[blk]);
    const float e = s / G;
    float a = 0.0f;
    for (int j = 0; j < 16; ++j) a = std::max(a, std::fabs(w[blk * 16 + j]));
    const bool normal_scale = std::fabs(s) >= std::ldexp(1.0f, -6);
    if (row < 4) {
      ASSERT_TRUE(normal_scale) << "bits " << bits << " block " << blk << " s " << s;
    }
    normal_blocks += normal_scale;
    subnormal_blocks += s != 0.0f && !normal_scale;
    zero_blocks += s == 0.0f;
    float bound = a;  // a block stored as zero errs by at most its largest weight
    if (s != 0.0f) {
      const float r = (a / 6.0f) / std::fabs(e);
      bound = std::fabs(e) * std::max({half_gap, L[0] + 6.0f * r, 6.0f * r - 6.0f});
    } else {
      EXPECT_LE(a, 6.0f * std::ldexp(1.0f, -10) / G * (1.0f + 1e-5f));
    }
    for (int j = 0; j < 16; ++j) {
      const int64_t i = blk * 16 + j;
      ASSERT_EQ(d[i], L[codes[i]] * e);
      ASSERT_LE(std::fabs(w[i] - d[i]), bound * (1.0f + 1e-5f)) << "bits " << bits << " at " << i;
      if (normal_scale) {
        ASSERT_LE(std::fabs(w[i] - d[i]), a * rel_bound * (1.0f + 1e-5f))
            << "bits " << bits << " at " << i;
      }
    }
  }
  EXPECT_EQ(normal_blocks, 40);  // rows 0-3
  EXPECT_GT(subnormal_blocks, 0);
  EXPECT_EQ(zero_blocks, 10);  // row 5
}

TEST(LutCodec, RandomErrorWithinAnalyticBound) {
  EXPECT_NEAR(RelativeBound(3), 0.2650f, 1e-4f);
  EXPECT_NEAR(RelativeBound(2), 0.4294f, 1e-4f);
  uint32_t seed = 7;
  for (int bits : {2, 3}) {
    for (float mag : {1e-4f, 0.005f, 0.02f, 1.0f, 50.0f, 3000.0f}) CheckRandom(bits, mag, seed++);
  }
}

// The global scale keeps block scales in E4M3's normal range, so the relative error does not
// grow as weights shrink: the same N(0, 1) draws scaled by sigma = 0.005, 0.02 and 1 (typical
// LLM weights and a unit reference) give nearly the same relative RMS error. Without the global
// scale, sigma = 0.005 was 26% (lut3) and 15% (lut2) worse than sigma = 1.
TEST(LutCodec, RelativeRmsErrorIndependentOfMagnitude) {
  const int64_t out = 256, in = 1024;
  std::mt19937 rng(123);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> z(out * in);
  for (float& x : z) x = normal(rng);
  for (int bits : {3, 2}) {
    double rel[3];
    const float sigmas[3] = {0.005f, 0.02f, 1.0f};
    for (int k = 0; k < 3; ++k) {
      std::vector<float> w(z.size());
      for (size_t i = 0; i < z.size(); ++i) w[i] = sigmas[k] * z[i];
      auto q = Codec(bits).Quantize(w.data(), out, in, {});
      ASSERT_TRUE(q.ok()) << q.status();
      const std::vector<float> d = Dequant(Codec(bits), q->view);
      double err2 = 0.0, ref2 = 0.0;
      for (size_t i = 0; i < w.size(); ++i) {
        const double diff = static_cast<double>(w[i]) - d[i];
        err2 += diff * diff;
        ref2 += static_cast<double>(w[i]) * w[i];
      }
      rel[k] = std::sqrt(err2 / ref2);
    }
    std::printf("lut%d relative RMS error: sigma 0.005 %.6f, 0.02 %.6f, 1 %.6f\n", bits, rel[0],
                rel[1], rel[2]);
    EXPECT_NEAR(rel[0], rel[2], 0.05 * rel[2]) << "lut" << bits;
    EXPECT_NEAR(rel[1], rel[2], 0.05 * rel[2]) << "lut" << bits;
    EXPECT_LT(rel[2], bits == 3 ? 0.16 : 0.34) << "lut" << bits;
  }
}

TEST(LutCodec, GlobalScaleMatchesNvfp4AndHonoursSharedAmax) {
  // nvfp4 computes (1 / amax) * 2688, which for amax = 11 is one ulp away from 2688 / 11.
  EXPECT_EQ(LutGlobalScale(11.0f), (1.0f / 11.0f) * 2688.0f);
  EXPECT_EQ(LutGlobalScale(0.0f), 1.0f);
  auto nvfp4 = FindWeightCodec("nvfp4");
  ASSERT_TRUE(nvfp4.ok()) << nvfp4.status();
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(4 * 64);
  for (float& x : w) x = normal(rng);
  float amax = 0.0f;
  for (float x : w) amax = std::max(amax, std::fabs(x));
  for (float shared : {0.0f, 11.0f, 4.0f * amax}) {
    QuantizeOptions o;
    o.shared_amax = shared;
    auto ref = (*nvfp4)->Quantize(w.data(), 4, 64, o);
    ASSERT_TRUE(ref.ok()) << ref.status();
    const auto& rg = ref->view.parts.at("weight_global_scale");
    for (int bits : {2, 3}) {
      auto q = Codec(bits).Quantize(w.data(), 4, 64, o);
      ASSERT_TRUE(q.ok()) << q.status();
      EXPECT_EQ(Global(q->view), LutGlobalScale(shared > 0.0f ? shared : amax));
      const auto& g = q->view.parts.at("weight_global_scale");
      EXPECT_EQ(g.dtype, rg.dtype);
      EXPECT_EQ(g.shape, rg.shape);
      ASSERT_EQ(g.nbytes, rg.nbytes);
      EXPECT_EQ(std::memcmp(g.data, rg.data, g.nbytes), 0) << "shared_amax " << shared;
    }
  }
  QuantizeOptions o;
  o.shared_amax = 0.5f * amax;
  EXPECT_THAT(Codec(3).Quantize(w.data(), 4, 64, o).status().message(),
              AllOf(HasSubstr("lut3"), HasSubstr("shared_amax"), HasSubstr("below")));
  o.shared_amax = INFINITY;
  EXPECT_THAT(Codec(2).Quantize(w.data(), 4, 64, o).status().message(), HasSubstr("shared_amax"));
}

TEST(LutCodec, PackedLayoutAndBitsPerWeight) {
  // lut2: element 0 in bits 0-1 of byte 0. Step 1 (amax 6) with codes 0, 1, 2, 3 -> 0b11100100.
  std::vector<float> w(16, 0.0f);
  w[0] = kLut2Levels[0], w[1] = 0.0f, w[2] = kLut2Levels[2], w[3] = 6.0f;
  auto q = Codec(2).Quantize(w.data(), 1, 16, {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->view.parts.at("weight_packed").shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(q->view.parts.at("weight_packed").data[0], 0xE4);
  EXPECT_EQ(q->view.parts.at("weight_packed").data[1], 0x55);  // four zeros at code 1
  EXPECT_EQ(q->view.parts.at("weight_scale").shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(Global(q->view), 448.0f);
  EXPECT_EQ(q->view.parts.size(), 3u);
  EXPECT_DOUBLE_EQ(Codec(3).BitsPerWeight(4096, 4096, 0), 3.5 + 32.0 / (4096.0 * 4096.0));
  EXPECT_DOUBLE_EQ(Codec(2).BitsPerWeight(4096, 4096, 0), 2.5 + 32.0 / (4096.0 * 4096.0));
  EXPECT_DOUBLE_EQ(Codec(3).BitsPerWeight(1, 16, 0), 5.5);  // 6 + 1 + 4 bytes over 16 weights
  EXPECT_DOUBLE_EQ(Codec(2).BitsPerWeight(1, 16, 0), 4.5);  // 4 + 1 + 4 bytes
  for (int bits : {2, 3}) {
    auto c = FindWeightCodec(absl::StrCat("lut", bits));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*c, LutCodec(bits));
  }
  EXPECT_EQ(LutCodec(4), nullptr);
}

TEST(LutCodec, ErrorsNameTensorAndComponent) {
  std::vector<float> w(2 * 40, 1.0f);
  auto bad = Codec(3).Quantize(w.data(), 2, 40, {});
  EXPECT_THAT(bad.status().message(), HasSubstr("multiple of 16"));
  w[17] = INFINITY;
  bad = Codec(3).Quantize(w.data(), 2, 32, {});
  EXPECT_THAT(bad.status().message(), HasSubstr("weight [0, 17]"));
  w[17] = 1.0f;
  auto q = Codec(3).Quantize(w.data(), 2, 32, {});
  ASSERT_TRUE(q.ok()) << q.status();
  QuantizedView v = q->view;
  v.parts.erase("weight_packed");
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("mlp.down"), HasSubstr("'weight_packed'"), HasSubstr("lacks")));
  v = q->view;
  v.parts["weight_scale"].dtype = DType::kU8;
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("mlp.down"), HasSubstr("'weight_scale'"),
                    HasSubstr("expected f8_e4m3 [2, 2]")));
  v = q->view;
  v.parts["weight_packed"].shape = {2, 16};
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(), HasSubstr("expected u8 [2, 12]"));
  v = q->view;
  v.in_features = 24;
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("mlp.down"), HasSubstr("multiple of 16")));

  // The global scale: required, one f32, positive and finite.
  v = q->view;
  v.parts.erase("weight_global_scale");
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("mlp.down"), HasSubstr("'weight_global_scale'"), HasSubstr("f32 [1]"),
                    HasSubstr("lacks")));
  v = q->view;
  v.parts["weight_global_scale"].dtype = DType::kBF16;
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("mlp.down"), HasSubstr("'weight_global_scale'"),
                    HasSubstr("expected f32 [1]")));
  std::vector<uint8_t> two(8, 0);
  v = q->view;
  v.parts["weight_global_scale"].shape = {2};
  v.parts["weight_global_scale"].data = two.data();
  v.parts["weight_global_scale"].nbytes = 8;
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("'weight_global_scale'"), HasSubstr("expected f32 [1]")));
  v = q->view;
  v.parts["weight_global_scale"].nbytes = 2;
  EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
              AllOf(HasSubstr("'weight_global_scale'"), HasSubstr("expected 4")));
  v = q->view;
  v.parts["weight_global_scale"].shape = {};  // a scalar holds the same one value
  EXPECT_TRUE(Codec(3).Validate(v, "mlp.down").ok()) << Codec(3).Validate(v, "mlp.down");
  for (float g : {0.0f, -448.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY}) {
    std::vector<uint8_t> bytes(4);
    std::memcpy(bytes.data(), &g, 4);
    v = q->view;
    v.parts["weight_global_scale"].data = bytes.data();
    EXPECT_THAT(Codec(3).Validate(v, "mlp.down").message(),
                AllOf(HasSubstr("mlp.down"), HasSubstr("'weight_global_scale'"),
                      HasSubstr("positive finite")))
        << g;
  }
}

}  // namespace
}  // namespace dq
