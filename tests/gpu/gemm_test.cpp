// The building blocks of the device linear layers against the CPU reference: the activation
// quantizers (bit-exact against the codecs' QuantizeActivations), the NVFP4 weight unpacker
// (exact against DequantizeRow up to the global scale), and the cuBLASLt wrapper.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/cuda/act_quant.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/linear_kernels.h"
#include "engine/quant/fp8_e4m3.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::FromBf16;
using gpu_test::RandomFloats;
using gpu_test::RoundBf16;
using gpu_test::ToBf16;

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

// Rows with a spread of magnitudes per block (subnormal E4M3 block scales, saturation), a zero
// row, and a row with non-finite values.
std::vector<float> ActivationRows(int64_t m, int64_t n, uint64_t seed) {
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * n), seed);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      x[r * n + i] *= std::ldexp(1.0f, static_cast<int>((r * 7 + i / 16 * 5) % 23) - 14);
    }
  }
  if (m > 2) std::fill(x.begin() + n, x.begin() + 2 * n, 0.0f);
  if (m > 3) {
    x[2 * n + 3] = INFINITY;
    x[2 * n + 5] = -INFINITY;
    x[2 * n + 17] = NAN;
  }
  return RoundBf16(x);
}

TEST(ActQuant, Fp8PerTokenMatchesCpuBitForBit) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const WeightCodec* codec = FindWeightCodec("fp8").value();
  for (const int64_t n : {2560, 8 * 37 + 3, 9728}) {  // vector and scalar kernels
    const int64_t m = 29;
    const std::vector<float> x = ActivationRows(m, n, seed + n);
    DeviceBuffer dx = DeviceBuffer::From(ToBf16(x));
    DeviceBuffer dq(m * n), ds(4 * m);
    QuantizeFp8PerToken(dx.get<__nv_bfloat16>(), m, n, dq.get<__nv_fp8_e4m3>(), ds.get<float>(),
                        nullptr);
    const auto codes = dq.ToHost<uint8_t>();
    const auto scales = ds.ToHost<float>();
    int64_t mismatches = 0;
    for (int64_t r = 0; r < m; ++r) {
      std::vector<float> ref(x.begin() + r * n, x.begin() + (r + 1) * n);
      codec->QuantizeActivations(ComputeMode::kW8A8, 0.0f, ref.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float got = E4M3ToFloat(codes[r * n + i]) * scales[r];
        if (!SameFloat(got, ref[i]) && ++mismatches <= 5) {
          ADD_FAILURE() << "n " << n << " row " << r << " col " << i << ": x " << x[r * n + i]
                        << " gpu " << got << " cpu " << ref[i];
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "n " << n;
  }
}

void CheckNvfp4(float static_g, uint64_t seed) {
  const WeightCodec* codec = FindWeightCodec("nvfp4").value();
  const int64_t m = 33, n = 2560;
  std::vector<float> x = ActivationRows(m, n, seed);
  // Exact E2M1 ties under G = 1 (block amax 6 -> scale 1, step 1) in the last row's first block.
  const float ties[16] = {6,      0.25f,  0.75f, 1.25f, 1.75f, 2.5f,  3.5f,  5,
                          -0.25f, -0.75f, -2.5f, -5,    0,     -0.0f, 1e-3f, 4.875f};
  std::copy(ties, ties + 16, x.begin() + (m - 1) * n);
  DeviceBuffer dx = DeviceBuffer::From(ToBf16(x));
  DeviceBuffer dq(2 * m * n), dg(4 * m);
  QuantDequantNvfp4(dx.get<__nv_bfloat16>(), m, n, static_g, dq.get<__nv_bfloat16>(),
                    dg.get<float>(), nullptr);
  const std::vector<float> q = FromBf16(dq.ToHost<__nv_bfloat16>());
  const auto inv_g = dg.ToHost<float>();
  int64_t mismatches = 0;
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> ref(x.begin() + r * n, x.begin() + (r + 1) * n);
    codec->QuantizeActivations(ComputeMode::kW4A4, static_g, ref.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // Same E2M1 code and block scale <=> equal up to the fp32 roundings of s / G and 1 / G.
      const double got = static_cast<double>(q[i + r * n]) * inv_g[r];
      const double want = ref[i];
      const bool ok = (std::isnan(got) && std::isnan(want)) ||
                      std::fabs(got - want) <= 0x1p-22 * std::fabs(want);
      if (!ok && ++mismatches <= 5) {
        ADD_FAILURE() << "G " << static_g << " row " << r << " col " << i << ": x " << x[r * n + i]
                      << " gpu " << got << " cpu " << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ActQuant, Nvfp4StaticAndDynamicMatchCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  CheckNvfp4(0.0f, seed);      // dynamic per-row global scale
  CheckNvfp4(1.0f, seed + 1);  // static (the tie row is calibrated for G = 1)
  CheckNvfp4(2688.0f / 3.7f, seed + 2);
}

TEST(Nvfp4Unpack, MatchesDequantizeRowTimesGlobal) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t out = 96, in = 512;
  const std::vector<float> w = RandomFloats(out * in, seed, 0.02f);
  const WeightCodec* codec = FindWeightCodec("nvfp4").value();
  const QuantizedTensors t = codec->Quantize(w.data(), out, in, {}).value();
  const auto& packed = t.view.parts.at("weight_packed");
  const auto& scales = t.view.parts.at("weight_scale");
  float g;
  std::memcpy(&g, t.view.parts.at("weight_global_scale").data, 4);
  DeviceBuffer dp = DeviceBuffer::From(std::span<const uint8_t>(packed.data, packed.nbytes));
  DeviceBuffer ds = DeviceBuffer::From(std::span<const uint8_t>(scales.data, scales.nbytes));
  DeviceBuffer dw(2 * out * in);
  UnpackNvfp4ToBf16(dp.get<uint8_t>(), ds.get<uint8_t>(), out, in, dw.get<__nv_bfloat16>(),
                    nullptr);
  const std::vector<float> got = FromBf16(dw.ToHost<__nv_bfloat16>());
  std::vector<float> row(in);
  double worst = 0;
  for (int64_t r = 0; r < out; ++r) {
    codec->DequantizeRow(t.view, r, row.data());
    for (int64_t i = 0; i < in; ++i) {
      const double d = std::fabs(static_cast<double>(got[r * in + i]) / g - row[i]);
      worst = std::max(worst, d / (std::fabs(row[i]) + 1e-30));
    }
  }
  EXPECT_LE(worst, 0x1p-22) << "unpacked E2M1 * s_b / G differs from DequantizeRow";
}

// Y = X · Wᵀ through GemmLt against a double-precision reference. Bound: the output rounding
// (2^-8 |y| for bf16, 2^-22 for fp32) plus 2^-17 sum |x w| for fp32 accumulation in another
// order; FP8 2^-11 sum |x w|: Hopper's FP8 MMA adds products with reduced precision between
// cuBLASLt's fp32 promotions (measured up to 2^-13.7 here, against ~2^-24 for bf16).
struct GemmCase {
  GemmInput input;
  int64_t m, n, k;
  bool f32_accumulate;
  bool scaled;
};

void RunGemmCase(GemmLt& lt, const GemmCase& c, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "input " << static_cast<int>(c.input) << " m " << c.m << " n "
                                  << c.n << " k " << c.k << " acc " << c.f32_accumulate
                                  << " scaled " << c.scaled);
  const bool fp8 = c.input == GemmInput::kE4M3;
  std::vector<float> x = RandomFloats(c.m * c.k, seed), w = RandomFloats(c.n * c.k, seed + 1);
  std::vector<uint8_t> x8(x.size()), w8(w.size());
  for (size_t i = 0; i < x.size(); ++i) x8[i] = FloatToE4M3(x[i] * 64), x[i] = E4M3ToFloat(x8[i]);
  for (size_t i = 0; i < w.size(); ++i) w8[i] = FloatToE4M3(w[i] * 64), w[i] = E4M3ToFloat(w8[i]);
  std::vector<float> xs = RandomFloats(c.m, seed + 2), ws = RandomFloats(c.n, seed + 3);
  if (!c.scaled) std::fill(xs.begin(), xs.end(), 1.0f), std::fill(ws.begin(), ws.end(), 1.0f);
  std::vector<float> y0 = RandomFloats(c.m * c.n, seed + 4);
  DeviceBuffer dx = fp8 ? DeviceBuffer::From(x8) : DeviceBuffer::From(ToBf16(x));
  DeviceBuffer dw = fp8 ? DeviceBuffer::From(w8) : DeviceBuffer::From(ToBf16(w));
  DeviceBuffer dxs = DeviceBuffer::From(xs), dws = DeviceBuffer::From(ws);
  DeviceBuffer dy = c.f32_accumulate ? DeviceBuffer::From(y0) : DeviceBuffer(2 * c.m * c.n);
  GemmArgs a;
  a.input = c.input;
  a.m = c.m, a.n = c.n, a.k = c.k;
  a.x = dx.get(), a.w = dw.get();
  a.alpha = 0.5f;
  if (c.scaled) a.x_scale = dxs.get<float>(), a.w_scale = dws.get<float>();
  if (c.f32_accumulate) {
    a.y_f32 = dy.get<float>(), a.accumulate = true;
  } else {
    a.y_bf16 = dy.get<__nv_bfloat16>();
  }
  if (c.scaled && !lt.Supported(a)) {
    // LinearForward then takes the fp32 + epilogue path (tested in linear_test).
    std::printf("gemm e4m3 m %lld n %lld acc %d: no outer-vector-scaled algorithm\n",
                static_cast<long long>(c.m), static_cast<long long>(c.n), c.f32_accumulate);
    return;
  }
  ASSERT_TRUE(lt.Supported(a));
  lt.Run(a, nullptr);
  const std::vector<float> got =
      c.f32_accumulate ? dy.ToHost<float>() : FromBf16(dy.ToHost<__nv_bfloat16>());
  double worst = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0, sa = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        s += static_cast<double>(x[i * c.k + p]) * w[j * c.k + p];
        sa += std::fabs(static_cast<double>(x[i * c.k + p]) * w[j * c.k + p]);
      }
      const double f = 0.5 * xs[i] * ws[j];
      const double base = c.f32_accumulate ? y0[i * c.n + j] : 0.0;
      const double want = base + f * s;
      const double bound = (c.f32_accumulate ? 0x1p-22 : 0x1p-8) * std::fabs(want) +
                           (fp8 ? 0x1p-11 : 0x1p-17) * std::fabs(f) * sa + 1e-30;
      worst = std::max(worst, std::fabs(got[i * c.n + j] - want) / bound);
    }
  }
  std::printf("gemm %s m %lld n %lld k %lld acc %d scaled %d: worst err / bound %.3g\n",
              fp8 ? "e4m3" : "bf16", static_cast<long long>(c.m), static_cast<long long>(c.n),
              static_cast<long long>(c.k), c.f32_accumulate, c.scaled, worst);
  EXPECT_LE(worst, 1.0);
}

TEST(GemmLt, Bf16AndFp8AgainstDoubleReference) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  GemmLt lt;
  const GemmCase cases[] = {
      {GemmInput::kBf16, 1, 256, 512, false, false},
      {GemmInput::kBf16, 77, 264, 640, false, false},
      {GemmInput::kBf16, 64, 128, 2560, true, false},
      {GemmInput::kE4M3, 5, 256, 512, false, true},
      {GemmInput::kE4M3, 77, 384, 1024, false, true},
      {GemmInput::kE4M3, 40, 256, 512, true, true},
      {GemmInput::kE4M3, 33, 128, 256, true, false},
  };
  for (const GemmCase& c : cases) RunGemmCase(lt, c, seed + c.m * 131 + c.k);
}

}  // namespace
}  // namespace dq::cuda
