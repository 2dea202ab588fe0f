// PackNvfp4ActivationRow: the w4a4 activation quantizer in stored form (codes + UE4M3 block
// scales) must decode to exactly what the codec's QuantizeActivations produces, for static and
// dynamic global scales, on fresh random rows with zero blocks, outliers, signed zeros, infs.
#include "engine/quant/nvfp4_activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/weight_codec.h"

namespace dq {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> RandomRow(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 17) - 8);
  for (float& v : x) v = d(rng) * mag;
  for (int64_t i = 0; i < 16 && n >= 32; ++i) x[16 + i] = 0.0f;  // an all-zero block
  x[0] *= 64.0f;                                                 // an outlier
  x[n - 1] = -0.0f;
  if (n > 40) x[40] = std::numeric_limits<float>::infinity();
  return x;
}

void CheckRow(const std::vector<float>& x, float static_g) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> packed(static_cast<size_t>(n / 2)), scales(static_cast<size_t>(n / 16));
  const float g = PackNvfp4ActivationRow(x.data(), n, static_g, packed.data(), scales.data());
  if (static_g > 0.0f) EXPECT_EQ(Bits(g), Bits(static_g));
  std::vector<float> ref = x;
  (*FindWeightCodec("nvfp4"))->QuantizeActivations(ComputeMode::kW4A4, static_g, ref.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t nib = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
    const float v = E2M1ToFloat(nib) * (E4M3ToFloat(scales[i / 16]) / g);
    ASSERT_EQ(Bits(v), Bits(ref[i]))
        << "element " << i << " x " << x[i] << " static G " << static_g;
  }
}

TEST(Nvfp4Activation, PackedCodesDecodeToQuantizeActivations) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (int rep = 0; rep < 50; ++rep) {
    const int64_t n = 16 * static_cast<int64_t>(3 + rng() % 200);
    const std::vector<float> x = RandomRow(n, rng);
    CheckRow(x, 0.0f);                             // dynamic per-row G_a
    CheckRow(x, 448.0f);                           // static, some blocks clip
    CheckRow(x, std::ldexp(2688.0f, -(rep % 9)));  // static, assorted magnitudes
  }
}

TEST(Nvfp4Activation, NanIsStoredAsPositiveZero) {
  std::vector<float> x(32, 1.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> packed(16), scales(2);
  PackNvfp4ActivationRow(x.data(), 32, 0.0f, packed.data(), scales.data());
  EXPECT_EQ((packed[2] >> 4) & 0xF, 0);
  EXPECT_EQ(packed[0] & 0xF, 7);  // 1.0 is the row's max: code 6.0 (7)
}

}  // namespace
}  // namespace dq
