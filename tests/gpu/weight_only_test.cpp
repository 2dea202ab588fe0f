// Weight-only decode GEMV and dequantization against the CPU references: every format, quantized
// from fresh random weights with our CPU codecs (GGUF: random blocks with finite scales), m = 1..8,
// bf16 and accumulated outputs. WeightOnlyBench (weight_only_bench.cpp) times them.
#include "engine/cuda/weight_only.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/quant/ggml_blocks.h"
#include "engine/quant/weight_codec.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/weight_only_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;

// The CPU reference rows of `w` (exact dequantized fp32).
std::vector<float> ReferenceRows(const LinearWeight& w) {
  std::vector<float> ref(w.out_features * w.in_features);
  for (int64_t r = 0; r < w.out_features; ++r) {
    float* dst = &ref[r * w.in_features];
    if (w.codec != nullptr) {
      w.codec->DequantizeRow(w.quantized, r, dst);
    } else {
      DequantizeRow(w.dtype, w.row(r), dst, w.in_features);
    }
  }
  return ref;
}

class WeightOnlyTest : public ::testing::TestWithParam<wo_test::FormatSpec> {};

TEST_P(WeightOnlyTest, DequantizeMatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " format " << GetParam().name);
  const int64_t out = 300, in = 1024;
  wo_test::HostWeight hw = wo_test::MakeRandomWeight(GetParam(), out, in, seed);
  ASSERT_TRUE(SupportsWeightOnly(hw.w));
  auto dev = UploadWeightOnly(hw.w);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const std::vector<float> ref = ReferenceRows(hw.w);
  DeviceBuffer d_out(out * in * 2);
  DequantizeToBf16(*dev, d_out.get<__nv_bfloat16>(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = d_out.ToHost<uint16_t>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < out * in; ++i) {
    const uint16_t want = gpu_test::ToBf16Bits(ref[i]);
    if (got[i] != want && mismatches++ < 5) {
      ADD_FAILURE() << "element [" << i / in << ", " << i % in << "]: got bf16 0x" << std::hex
                    << got[i] << ", want 0x" << want << std::dec << " (" << ref[i] << ")";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// y = x · Wᵀ in fp64 over the exact reference rows; checks both output modes for m = 1..8.
// GEMV of a random out × in matrix of `f` for each m in `ms`, both outputs, against the CPU.
// `tile`: the int tile GEMV's kernel choices (WeightOnlyGemvArgs::int_tile).
void CheckGemv(const wo_test::FormatSpec& f, int64_t out, int64_t in, std::vector<int> ms,
               const IntTileOptions& tile = {}) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed << " format " << f.name << " " << out << "x"
                                  << in << " int tile: " << tile.ctas_per_sm << " CTAs per SM, "
                                  << (tile.cluster ? "clusters" : "16-warp CTAs"));
  wo_test::HostWeight hw = wo_test::MakeRandomWeight(f, out, in, seed);
  auto dev = UploadWeightOnly(hw.w);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const std::vector<float> wref = ReferenceRows(hw.w);
  const std::vector<float> x = gpu_test::RoundBf16(gpu_test::RandomFloats(8 * in, seed + 1));
  const std::vector<float> acc0 = gpu_test::RandomFloats(8 * out, seed + 2);
  DeviceBuffer d_x = DeviceBuffer::From(gpu_test::ToBf16(x));
  DeviceBuffer d_y(8 * out * 2), d_acc(8 * out * 4);
  double worst = 0.0;
  for (int m : ms) {
    for (bool accumulate : {false, true}) {
      WeightOnlyGemvArgs args;
      args.x = d_x.get<__nv_bfloat16>();
      args.m = m;
      args.int_tile = tile;
      if (accumulate) {
        CUDA_CHECK(cudaMemcpy(d_acc.get(), acc0.data(), m * out * 4, cudaMemcpyHostToDevice));
        args.y_accumulate = d_acc.get<float>();
      } else {
        args.y_bf16 = d_y.get<__nv_bfloat16>();
      }
      WeightOnlyGemv(*dev, args, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto ybf = d_y.ToHost<__nv_bfloat16>();
      const auto yacc = d_acc.ToHost<float>();
      const auto yb = gpu_test::FromBf16(ybf);
      for (int mi = 0; mi < m; ++mi) {
        for (int64_t r = 0; r < out; ++r) {
          double dot = 0.0, mag = 0.0;
          for (int64_t k = 0; k < in; ++k) {
            const double p = static_cast<double>(wref[r * in + k]) * x[mi * in + k];
            dot += p;
            mag += std::fabs(p);
          }
          const double got =
              accumulate ? yacc[mi * out + r] - acc0[mi * out + r] : yb[mi * out + r];
          // fp32 summation (1e-5 of sum |w x|), plus the bf16 output's rounding or the fp32
          // accumulator's rounding of acc0 + y.
          const double tol = 1e-5 * mag + (accumulate ? 1e-6 * (std::fabs(acc0[mi * out + r]) + 1)
                                                      : std::ldexp(std::fabs(dot), -8));
          const double err = std::fabs(got - dot);
          worst = std::max(worst, err / (mag + 1e-30));
          ASSERT_LE(err, tol) << "m " << m << " row " << mi << " out " << r
                              << (accumulate ? " (accumulate)" : " (bf16)") << ": got " << got
                              << ", want " << dot;
        }
      }
    }
  }
  std::printf("[ %s %lldx%lld ] max |err| / sum|w x| = %.3g\n", f.name.c_str(),
              static_cast<long long>(out), static_cast<long long>(in), worst);
}

TEST_P(WeightOnlyTest, GemvMatchesCpu) {
  DQ_REQUIRE_GPU();
  CheckGemv(GetParam(), 300, 1024, {1, 2, 3, 4, 5, 8});
}

// An odd row count and a row length that is not a whole number of 128-unit chunks.
TEST_P(WeightOnlyTest, GemvOddShapeMatchesCpu) {
  DQ_REQUIRE_GPU();
  CheckGemv(GetParam(), 301, 4352, {1, 8});
}

// Enough 16-row tiles to fill every SM twice (the int tile GEMV's many-tile path; the shapes
// above take its few-tile cluster path): 289 tiles, an odd row count, 2560 inputs.
TEST_P(WeightOnlyTest, GemvManyTilesMatchesCpu) {
  DQ_REQUIRE_GPU();
  CheckGemv(GetParam(), 4619, 2560, {1, 3, 8});
}

INSTANTIATE_TEST_SUITE_P(Formats, WeightOnlyTest, ::testing::ValuesIn(wo_test::AllFormats()),
                         [](const auto& info) { return info.param.name; });

// The int tile GEMV's choices that are not the default (KernelOptions::int_tile), for the
// formats it runs (int4 / int2 with groups of 64 or 128), on the shapes above: one 16-warp CTA
// per tile instead of a 4-CTA cluster (few tiles, long rows: 301 x 4352, and 300 x 1024), and
// other CTA counts per SM for the many-tile path (289 tiles).
class IntTileOptionsTest : public WeightOnlyTest {};

TEST_P(IntTileOptionsTest, GemvIntTileOptionsMatchCpu) {
  DQ_REQUIRE_GPU();
  IntTileOptions no_cluster;
  no_cluster.cluster = false;
  CheckGemv(GetParam(), 301, 4352, {1, 8}, no_cluster);
  CheckGemv(GetParam(), 300, 1024, {1, 3}, no_cluster);
  for (int ctas : {1, 4, 8}) {
    IntTileOptions t;
    t.ctas_per_sm = ctas;
    CheckGemv(GetParam(), 4619, 2560, {1, 8}, t);
    if (HasFatalFailure()) return;
  }
}

std::vector<wo_test::FormatSpec> IntTileFormats() {
  std::vector<wo_test::FormatSpec> v;
  for (const auto& f : wo_test::AllFormats()) {
    if ((f.scheme == "int4" || f.scheme == "int2") && (f.group == 64 || f.group == 128)) {
      v.push_back(f);
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Formats, IntTileOptionsTest, ::testing::ValuesIn(IntTileFormats()),
                         [](const auto& info) { return info.param.name; });

TEST(WeightOnlyUploadTest, RejectsUnsupported) {
  LinearWeight w;
  w.dtype = DType::kQ5_1;
  w.out_features = 4;
  w.in_features = 32;
  EXPECT_FALSE(SupportsWeightOnly(w));
  auto s = UploadWeightOnly(w);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().ToString().find(DTypeName(DType::kQ5_1)), std::string::npos) << s.status();
}

}  // namespace
}  // namespace dq::cuda
