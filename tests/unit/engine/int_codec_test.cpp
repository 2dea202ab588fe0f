#include "engine/quant/int_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const WeightCodec& Codec(int bits) { return *IntCodec(bits); }

std::vector<float> Dequant(const WeightCodec& c, const QuantizedView& q) {
  std::vector<float> out(q.out_features * q.in_features);
  for (int64_t r = 0; r < q.out_features; ++r) c.DequantizeRow(q, r, &out[r * q.in_features]);
  return out;
}

float ScaleAt(const QuantizedView& q, int64_t i) {
  uint16_t h;
  std::memcpy(&h, q.parts.at("scales").data + 2 * i, 2);
  return F16ToF32(h);
}

TEST(IntPackBits, RoundTripsEveryCodeAtEveryPosition) {
  for (int bits : {1, 2, 3, 4, 5, 8}) {
    for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 11, 16, 21, 33}) {
      for (int64_t p = 0; p < n; ++p) {
        for (int v = 0; v < (1 << bits); ++v) {
          std::vector<uint8_t> codes(n);
          for (int64_t i = 0; i < n; ++i)
            codes[i] = static_cast<uint8_t>((i * 5 + 3) % (1 << bits));
          codes[p] = static_cast<uint8_t>(v);
          std::vector<uint8_t> packed(PackedBytes(n, bits), 0xAA), back(n);
          PackBits(codes.data(), n, bits, packed.data());
          // Bits past the last code stay 0 (the 0xAA filler must be overwritten).
          const int64_t used = n * bits;
          if (used % 8 != 0) {
            EXPECT_EQ(packed.back() >> (used % 8), 0);
          }
          UnpackBits(packed.data(), n, bits, back.data());
          ASSERT_EQ(back, codes) << "bits " << bits << " n " << n << " pos " << p << " v " << v;
        }
      }
    }
  }
}

TEST(IntPackBits, KnownLayouts) {
  uint8_t out[3];
  const uint8_t c4[2] = {1, 2};
  PackBits(c4, 2, 4, out);
  EXPECT_EQ(out[0], 0x21);  // element 0 in the low nibble
  const uint8_t c2[4] = {1, 2, 3, 0};
  PackBits(c2, 4, 2, out);
  EXPECT_EQ(out[0], 0x39);
  const uint8_t c3[8] = {1, 2, 3, 4, 5, 6, 7, 0};  // LSB-first stream across 3 bytes
  PackBits(c3, 8, 3, out);
  EXPECT_EQ(out[0], 0xD1);
  EXPECT_EQ(out[1], 0x58);
  EXPECT_EQ(out[2], 0x1F);
}

TEST(IntCodec, KnownAnswerInt4Group) {
  // min -1.5, max 6: scale = 7.5 / 15 = 0.5 (exact in f16), z = round(1.5 / 0.5) = 3; the
  // values sit on the grid, so codes are k and the reconstruction is exact.
  std::vector<float> w(64);
  for (int i = 0; i < 64; ++i) w[i] = static_cast<float>((i % 16) - 3) * 0.5f;
  auto q = Codec(4).Quantize(w.data(), 2, 32, {.group_size = 32});
  ASSERT_TRUE(q.ok()) << q.status();
  const QuantizedView& v = q->view;
  EXPECT_EQ(v.scheme, "int4");
  EXPECT_EQ(v.group_size, 32);
  EXPECT_EQ(ScaleAt(v, 0), 0.5f);
  EXPECT_EQ(v.parts.at("zeros").data[0], 3);
  EXPECT_EQ(v.parts.at("qweight").shape, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(v.parts.at("qweight").data[0], 0x10);  // codes 0, 1
  EXPECT_EQ(v.parts.at("qweight").data[7], 0xFE);  // codes 14, 15
  EXPECT_EQ(Dequant(Codec(4), v), w);
}

TEST(IntCodec, KnownAnswerInt8AndInt2AndTies) {
  // int8: [-2, 127/64] spans 255/64, scale 1/64, z 128.
  std::vector<float> w8(32);
  for (int i = 0; i < 32; ++i) w8[i] = static_cast<float>(i * 8 - 128) / 64.0f;
  w8[31] = 127.0f / 64.0f;
  auto q8 = Codec(8).Quantize(w8.data(), 1, 32, {.group_size = 32});
  ASSERT_TRUE(q8.ok()) << q8.status();
  EXPECT_EQ(ScaleAt(q8->view, 0), 1.0f / 64.0f);
  EXPECT_EQ(q8->view.parts.at("zeros").data[0], 128);
  EXPECT_EQ(q8->view.parts.at("qweight").data[1], 8);
  EXPECT_EQ(Dequant(Codec(8), q8->view), w8);
  // int2: [-1, 2] spans 3, scale 1, z 1. Ties round to even: 0.5 -> 0, 1.5 -> 2, -0.5 -> -0.
  std::vector<float> w2(32, 0.0f);
  w2[0] = -1.0f, w2[1] = 2.0f, w2[2] = 0.5f, w2[3] = 1.5f, w2[4] = -0.5f;
  auto q2 = Codec(2).Quantize(w2.data(), 1, 32, {.group_size = 32});
  ASSERT_TRUE(q2.ok()) << q2.status();
  EXPECT_EQ(ScaleAt(q2->view, 0), 1.0f);
  EXPECT_EQ(q2->view.parts.at("zeros").data[0], 1);
  uint8_t codes[5];
  UnpackBits(q2->view.parts.at("qweight").data, 5, 2, codes);
  EXPECT_EQ(std::vector<uint8_t>(codes, codes + 5), (std::vector<uint8_t>{0, 3, 1, 3, 1}));
}

TEST(IntCodec, DegenerateGroups) {
  std::vector<float> w(96);
  for (int i = 0; i < 32; ++i) w[i] = 0.0f, w[32 + i] = -2.0f, w[64 + i] = 0.3f;
  for (int bits : {2, 3, 4, 8}) {
    auto q = Codec(bits).Quantize(w.data(), 1, 96, {.group_size = 32});
    ASSERT_TRUE(q.ok()) << q.status();
    const std::vector<float> d = Dequant(Codec(bits), q->view);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(d[i], w[i]) << bits << " " << i;  // exact
    for (int i = 64; i < 96; ++i) EXPECT_EQ(d[i], F16ToF32(F32ToF16(0.3f)));
  }
}

// Every group's error is within half its step, and DequantizeRow is (q - z) * scale exactly.
void CheckRandom(int bits, int group, float magnitude, uint32_t seed) {
  const int64_t out = 5, in = 256;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, magnitude);
  std::vector<float> w(out * in);
  for (float& x : w) x = normal(rng);
  w[7] = 40.0f * magnitude;                                                      // an outlier
  for (int i = 0; i < group; ++i) w[in + i] = std::fabs(w[in + i]) + magnitude;  // all > 0
  auto q = Codec(bits).Quantize(w.data(), out, in, {.group_size = group});
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(Codec(bits).Validate(q->view, "t").ok());
  const std::vector<float> d = Dequant(Codec(bits), q->view);
  const int64_t ng = in / group;
  std::vector<uint8_t> codes(in);
  for (int64_t r = 0; r < out; ++r) {
    UnpackBits(q->view.parts.at("qweight").data + r * PackedBytes(in, bits), in, bits,
               codes.data());
    for (int64_t c = 0; c < in; ++c) {
      const float s = ScaleAt(q->view, r * ng + c / group);
      const int z = q->view.parts.at("zeros").data[r * ng + c / group];
      ASSERT_EQ(d[r * in + c], static_cast<float>(codes[c] - z) * s);
      ASSERT_LE(std::fabs(w[r * in + c] - d[r * in + c]), s * 0.5f * (1.0f + 1e-6f))
          << "bits " << bits << " group " << group << " at " << r << "," << c;
    }
  }
}

TEST(IntCodec, RandomErrorWithinHalfStep) {
  uint32_t seed = 1;
  for (int bits : {2, 3, 4, 8}) {
    for (int group : {32, 64, 128}) {
      for (float mag : {0.02f, 1.0f, 300.0f}) CheckRandom(bits, group, mag, seed++);
    }
  }
}

TEST(IntCodec, DefaultGroupAndBitsPerWeight) {
  std::vector<float> w(256, 0.5f);
  auto q = Codec(4).Quantize(w.data(), 1, 256, {});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->view.group_size, 128);
  EXPECT_DOUBLE_EQ(Codec(4).BitsPerWeight(8, 4096, 128), 4.1875);
  EXPECT_DOUBLE_EQ(Codec(4).BitsPerWeight(8, 4096, 0), 4.1875);
  EXPECT_DOUBLE_EQ(Codec(3).BitsPerWeight(8, 4096, 32), 3.75);
  EXPECT_DOUBLE_EQ(Codec(8).BitsPerWeight(8, 4096, 64), 8.375);
  EXPECT_DOUBLE_EQ(Codec(2).BitsPerWeight(8, 4096, 128), 2.1875);
  EXPECT_EQ(IntCodec(5), nullptr);
}

TEST(IntCodec, RegisteredUnderTheirNames) {
  for (int bits : {2, 3, 4, 8}) {
    auto c = FindWeightCodec(absl::StrCat("int", bits));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*c, IntCodec(bits));
  }
}

TEST(IntCodec, QuantizeErrors) {
  std::vector<float> w(256, 1.0f);
  for (int g : {16, 48, 256}) {
    auto q = Codec(4).Quantize(w.data(), 1, 256, {.group_size = g});
    EXPECT_THAT(q.status().message(), AllOf(HasSubstr("group size"), HasSubstr("32, 64 or 128")));
  }
  auto q = Codec(4).Quantize(w.data(), 1, 96, {.group_size = 64});
  EXPECT_THAT(q.status().message(), HasSubstr("multiple of the group size 64"));
  w[3] = NAN;
  q = Codec(4).Quantize(w.data(), 1, 256, {});
  EXPECT_THAT(q.status().message(), HasSubstr("weight [0, 3]"));
  w[3] = 1e6f, w[4] = -1e6f;  // a range of 2e6 / 15 > 65504
  q = Codec(4).Quantize(w.data(), 1, 256, {});
  EXPECT_THAT(q.status().message(), HasSubstr("f16"));
}

TEST(IntCodec, ValidateNamesTensorAndComponent) {
  std::vector<float> w(2 * 128, 0.25f);
  auto q = Codec(3).Quantize(w.data(), 2, 128, {.group_size = 64});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(Codec(3).Validate(q->view, "layer").ok());
  QuantizedView v = q->view;
  v.parts.erase("zeros");
  EXPECT_THAT(Codec(3).Validate(v, "blk.0.up").message(),
              AllOf(HasSubstr("blk.0.up"), HasSubstr("'zeros'"), HasSubstr("lacks")));
  v = q->view;
  v.parts["scales"].dtype = DType::kF32;
  EXPECT_THAT(
      Codec(3).Validate(v, "blk.0.up").message(),
      AllOf(HasSubstr("blk.0.up"), HasSubstr("'scales'"), HasSubstr("expected f16 [2, 2]")));
  v = q->view;
  v.parts["qweight"].shape = {2, 47};
  EXPECT_THAT(Codec(3).Validate(v, "blk.0.up").message(),
              AllOf(HasSubstr("'qweight'"), HasSubstr("expected u8 [2, 48]")));
  v = q->view;
  v.parts["qweight"].nbytes = 10;
  EXPECT_THAT(Codec(3).Validate(v, "x").message(), HasSubstr("holds 10 bytes"));
  v = q->view;
  v.group_size = 96;
  EXPECT_THAT(Codec(3).Validate(v, "blk.0.up").message(),
              AllOf(HasSubstr("blk.0.up"), HasSubstr("group size 96")));
  v = q->view;
  v.in_features = 100;
  EXPECT_THAT(Codec(3).Validate(v, "x").message(), HasSubstr("in_features 100"));
}

}  // namespace
}  // namespace dq
