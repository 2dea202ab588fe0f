#include "engine/quant/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_checkpoint.h"

namespace dq {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The OCP E4M3FN definition written out independently of the implementation (double math).
double E4M3Reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// Nearest finite E4M3 code by brute force over the 127 non-negative finite codes, ties to the
// even code (mantissa bit 0 clear), saturating beyond 448. The oracle for random inputs.
uint8_t E4M3Oracle(float f) {
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(E4M3Reference(c) - a), bd = std::fabs(E4M3Reference(best) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) best = c;
  }
  return static_cast<uint8_t>(best | (std::signbit(f) ? 0x80 : 0));
}

TEST(E4M3Test, DecodesEveryCodeExactly) {
  for (int c = 0; c < 256; ++c) {
    const float v = E4M3ToFloat(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(v), E4M3Reference(c)) << c;
      EXPECT_EQ(std::signbit(v), c >= 0x80) << c;
    }
  }
  // Hand-checked landmarks: smallest subnormal 2^-9, largest subnormal 7*2^-9, smallest normal
  // 2^-6, one (e=7), 0.125 (e=4: compressed-tensors' zero-scale stand-in), max 448 = 1.75*2^8.
  EXPECT_EQ(E4M3ToFloat(0x01), 0.001953125f);
  EXPECT_EQ(E4M3ToFloat(0x07), 0.013671875f);
  EXPECT_EQ(E4M3ToFloat(0x08), 0.015625f);
  EXPECT_EQ(E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(E4M3ToFloat(0x20), 0.125f);
  EXPECT_EQ(E4M3ToFloat(0x30), 0.5f);
  EXPECT_EQ(E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToFloat(0xFE), -448.0f);
  EXPECT_EQ(E4M3ToFloat(0x80), 0.0f);
  EXPECT_TRUE(std::signbit(E4M3ToFloat(0x80)));
}

TEST(E4M3Test, EveryFiniteCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(FloatToE4M3(E4M3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(E4M3Test, TiesBetweenEveryAdjacentPairGoToEvenMantissa) {
  for (int c = 0; c < 0x7E; ++c) {
    for (int sign : {0, 0x80}) {
      const float lo = E4M3ToFloat(static_cast<uint8_t>(c | sign));
      const float hi = E4M3ToFloat(static_cast<uint8_t>((c + 1) | sign));
      const float mid = (lo + hi) / 2;  // exact: both have <= 4 significant bits
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(FloatToE4M3(mid), even | sign) << "tie between codes " << c << " and " << c + 1;
      EXPECT_EQ(FloatToE4M3(std::nextafter(mid, lo)), c | sign) << c;
      EXPECT_EQ(FloatToE4M3(std::nextafter(mid, hi)), (c + 1) | sign) << c;
    }
  }
}

TEST(E4M3Test, SaturatesAndMapsSpecials) {
  // 448 is the largest finite value; anything larger, even past 480 (the NaN pattern's value
  // under IEEE rules), clips to 448 rather than becoming NaN.
  for (float f : {448.0f, 448.001f, 464.0f, 479.0f, 480.0f, 1e6f, 3e38f, kInf}) {
    EXPECT_EQ(FloatToE4M3(f), 0x7E) << f;
    EXPECT_EQ(FloatToE4M3(-f), 0xFE) << f;
  }
  EXPECT_EQ(FloatToE4M3(kNaN), 0x7F);
  EXPECT_EQ(FloatToE4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToE4M3(-0.0f), 0x80);
  // 2^-10 is half the smallest subnormal: ties to 0 (even); just above it rounds up to 2^-9.
  EXPECT_EQ(FloatToE4M3(0x1p-10f), 0x00);
  EXPECT_EQ(FloatToE4M3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(FloatToE4M3(-0x1p-11f), 0x80);  // negative underflow keeps the sign
  EXPECT_EQ(FloatToE4M3(1e-40f), 0x00);     // fp32 subnormal
  // 15*2^-10 lies between the largest subnormal 7*2^-9 (odd) and 2^-6 (code 8, even).
  EXPECT_EQ(FloatToE4M3(15 * 0x1p-10f), 0x08);
  // 432 is the tie between 416 (0x7D, odd) and 448 (0x7E, even).
  EXPECT_EQ(FloatToE4M3(432.0f), 0x7E);
  EXPECT_EQ(FloatToE4M3(std::nextafter(432.0f, 0.0f)), 0x7D);
  EXPECT_EQ(FloatToE4M3(1.0625f), 0x38);  // 1 vs 1.125 -> 1
  EXPECT_EQ(FloatToE4M3(1.1875f), 0x3A);  // 1.125 vs 1.25 -> 1.25
}

TEST(E4M3Test, MatchesBruteForceNearestOnRandomInputs) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-14, 10);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::ldexp(mant(rng), expo(rng));
    ASSERT_EQ(FloatToE4M3(f), E4M3Oracle(f)) << f;
  }
}

TEST(E2M1Test, DecodesEveryCode) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(E2M1ToFloat(static_cast<uint8_t>(c)), want[c]) << c;
    EXPECT_EQ(std::signbit(E2M1ToFloat(static_cast<uint8_t>(c))), c >= 8) << c;
    EXPECT_EQ(FloatToE2M1(want[c]), c) << c;                          // round trip, -0 included
    EXPECT_EQ(E2M1ToFloat(static_cast<uint8_t>(c | 0xF0)), want[c]);  // high bits ignored
  }
}

TEST(E2M1Test, TiesGoToEvenMantissa) {
  // Midpoint -> code; the even neighbour is the one whose mantissa bit (bit 0) is 0:
  // 0|0.5 -> 0, 0.5|1 -> 1 (code 2), 1|1.5 -> 1, 1.5|2 -> 2, 2|3 -> 2, 3|4 -> 4, 4|6 -> 4.
  const struct {
    float mid;
    int code, below, above;
  } ties[] = {{0.25f, 0, 0, 1}, {0.75f, 2, 1, 2}, {1.25f, 2, 2, 3}, {1.75f, 4, 3, 4},
              {2.5f, 4, 4, 5},  {3.5f, 6, 5, 6},  {5.0f, 6, 6, 7}};
  for (const auto& t : ties) {
    EXPECT_EQ(FloatToE2M1(t.mid), t.code) << t.mid;
    EXPECT_EQ(FloatToE2M1(-t.mid), t.code | 8) << t.mid;
    EXPECT_EQ(FloatToE2M1(std::nextafter(t.mid, 0.0f)), t.below) << t.mid;
    EXPECT_EQ(FloatToE2M1(std::nextafter(t.mid, 10.0f)), t.above) << t.mid;
  }
}

TEST(E2M1Test, SaturatesAndMapsSpecials) {
  for (float f : {6.0f, 6.5f, 7.0f, 1e9f, kInf}) {
    EXPECT_EQ(FloatToE2M1(f), 7) << f;
    EXPECT_EQ(FloatToE2M1(-f), 15) << f;
  }
  EXPECT_EQ(FloatToE2M1(kNaN), 0);
  EXPECT_EQ(FloatToE2M1(-0.0f), 8);
  EXPECT_EQ(FloatToE2M1(-0.1f), 8);  // rounds to zero, keeps the sign
  EXPECT_EQ(FloatToE2M1(0.1f), 0);
}

TEST(E2M1Test, MatchesBruteForceNearest) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const float d = std::fabs(E2M1ToFloat(c) - std::fabs(f));
      const float bd = std::fabs(E2M1ToFloat(best) - std::fabs(f));
      if (d < bd || (d == bd && c % 2 == 0)) best = c;
    }
    ASSERT_EQ(FloatToE2M1(f), best | (f < 0 ? 8 : 0)) << f;
  }
}

// torch's float8_e4m3fn cast (after compressed-tensors' clamp to +-448) and compressed-tensors'
// cast_to_fp4 + pack_fp4_to_uint8, recorded by tests/fixtures/quant/make_nvfp4_fp8_fixtures.py:
// every E4M3 midpoint, one ulp either side of each, random values; E2M1 ties and random values.
TEST(E4M3Test, MatchesTorchAndCompressedTensorsCasts) {
  auto ck = SafetensorsCheckpoint::Open(std::string(DQ_SOURCE_DIR) +
                                        "/tests/fixtures/quant/nvfp4_fp8_fixture.safetensors");
  ASSERT_TRUE(ck.ok()) << ck.status();
  const TensorView* in = (*ck)->Find("scalar.e4m3_in");
  const TensorView* out = (*ck)->Find("scalar.e4m3");
  ASSERT_TRUE(in && out && in->numel() == out->numel() && out->dtype == DType::kF8E4M3);
  for (int64_t i = 0; i < in->numel(); ++i) {
    float f;
    std::memcpy(&f, in->data + 4 * i, 4);
    EXPECT_EQ(FloatToE4M3(f), out->data[i]) << f;
  }
  const TensorView* fin = (*ck)->Find("scalar.e2m1_in");
  const TensorView* packed = (*ck)->Find("scalar.e2m1_packed");
  ASSERT_TRUE(fin && packed && fin->numel() == 2 * packed->numel());
  for (int64_t i = 0; i < fin->numel(); ++i) {
    float f;
    std::memcpy(&f, fin->data + 4 * i, 4);
    EXPECT_EQ(FloatToE2M1(f), (packed->data[i / 2] >> (4 * (i % 2))) & 0xF) << f;
  }
}

}  // namespace
}  // namespace dq
