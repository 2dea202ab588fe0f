// UploadLinear + LinearForward against the CPU reference (cpu::MatMul on the same LinearWeight):
// bf16, fp8 W8A8 (outer-vector scaling and the epilogue fallback), nvfp4 W4A4 (static and
// dynamic activation global scale), and the weight-only dispatch (GEMV for m <= 8, dequantize +
// GEMM above). Bounds: see gpu_test::Compare (2^-8 |ref| for the bf16 output, 2^-17 sum |x w|
// for the summation order, 2^-11 for FP8's reduced-precision MMA accumulation; the weight-only
// prefill path adds the bf16 rounding of its dequantized weights, 2^-9 sum |x w|).
#include "engine/cuda/linear.h"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/cuda/device_buffer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/linear_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::CodecWeight;
using gpu_test::Compare;
using gpu_test::CpuReference;
using gpu_test::ErrorReport;
using gpu_test::FreshSeed;
using gpu_test::FromBf16;
using gpu_test::RandomFloats;
using gpu_test::Reference;
using gpu_test::RoundBf16;
using gpu_test::ToBf16;

constexpr double kOutRel = 0x1p-8;
constexpr double kSumRel = 0x1p-17;
// Hopper's FP8 tensor cores add products with reduced precision inside each MMA (cuBLASLt
// promotes to fp32 between them); measured up to 2^-13.7 sum |x w| on random data (GemmLt test),
// so FP8 GEMMs get 2^-11. Activation quantization is checked bit for bit in gemm_test.
constexpr double kSumRelFp8 = 0x1p-11;

struct Case {
  int64_t m, out, in;
};

// Runs `lw` on the device for each case (bf16 output, then fp32 accumulate for the first
// case) and compares with the CPU reference.
void CheckLayer(const char* name, const LinearWeight& lw, const std::vector<int64_t>& ms,
                uint64_t seed, LinearContext& ctx, double sum_rel = kSumRel) {
  auto up = UploadLinear(lw);
  ASSERT_TRUE(up.ok()) << up.status();
  const DeviceLinear& d = *up;
  const int64_t out = lw.out_features, in = lw.in_features;
  for (const int64_t m : ms) {
    SCOPED_TRACE(testing::Message() << name << " m " << m << " out " << out << " in " << in);
    // Activations with per-token magnitudes spread over 2^-4..2^4 (per-token scales matter).
    std::vector<float> x = RandomFloats(m * in, seed + m);
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t i = 0; i < in; ++i) x[t * in + i] *= std::ldexp(1.0f, (t * 3) % 9 - 4);
    }
    x = RoundBf16(x);
    const Reference ref = CpuReference(lw, x, m);
    DeviceBuffer dx = DeviceBuffer::From(ToBf16(x));
    DeviceBuffer dy(2 * m * out);
    LinearArgs a;
    a.x = dx.get<__nv_bfloat16>();
    a.m = m;
    a.y_bf16 = dy.get<__nv_bfloat16>();
    LinearForward(d, a, ctx, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const ErrorReport e = Compare(FromBf16(dy.ToHost<__nv_bfloat16>()), ref, kOutRel, sum_rel);
    std::printf("%-22s m %5lld [%5lld x %5lld]: max |err| %.3g, rel %.3g, err/bound %.3g\n", name,
                static_cast<long long>(m), static_cast<long long>(out), static_cast<long long>(in),
                e.max_abs, e.rel, e.worst_ratio);
    EXPECT_LE(e.worst_ratio, 1.0) << "worst at " << e.worst_index;
    if (m != ms.front()) continue;
    // Accumulate into an fp32 residual: y = y0 + x Wᵀ, no output rounding.
    const std::vector<float> y0 = RandomFloats(m * out, seed + 7);
    DeviceBuffer dacc = DeviceBuffer::From(y0);
    a.y_bf16 = nullptr;
    a.y_accumulate = dacc.get<float>();
    LinearForward(d, a, ctx, nullptr);
    const std::vector<float> got = dacc.ToHost<float>();
    Reference shifted = ref;
    for (size_t i = 0; i < got.size(); ++i) shifted.y[i] += y0[i];
    // No bf16 rounding; the fp32 add of y0 rounds once (2^-24 |result|, bounded by 2^-22).
    const ErrorReport ea = Compare(got, shifted, 0x1p-22, sum_rel);
    EXPECT_LE(ea.worst_ratio, 1.0) << "accumulate: worst at " << ea.worst_index;
  }
}

const std::vector<int64_t> kSmallMs = {1, 3, 8, 77, 512};

TEST(Linear, Bf16MatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  LinearContext ctx;
  const int64_t out = 384, in = 1024;
  CheckLayer("bf16", gpu_test::Bf16Weight(RandomFloats(out * in, seed, 0.05f), out, in), kSmallMs,
             seed, ctx);
}

TEST(Linear, Fp8W8A8MatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t out = 384, in = 1024;
  std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  for (int64_t r = 0; r < out; ++r) {  // per-channel magnitudes 2^-3..2^3
    for (int64_t i = 0; i < in; ++i) w[r * in + i] *= std::ldexp(1.0f, r % 7 - 3);
  }
  const LinearWeight lw = CodecWeight("fp8", ComputeMode::kW8A8, w, out, in);
  LinearContext ctx;
  CheckLayer("fp8 w8a8", lw, kSmallMs, seed, ctx, kSumRelFp8);
  ctx.ForceScaleEpilogueForTesting(true);
  CheckLayer("fp8 w8a8 (epilogue)", lw, {3, 77}, seed + 1, ctx, kSumRelFp8);
}

TEST(Linear, Nvfp4W4A4MatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t out = 256, in = 1024;
  const std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  LinearContext ctx;
  // Static: input_global_scale = 6 * 448 / calibrated amax (amax 6: a few values clip).
  CheckLayer("nvfp4 w4a4 static", CodecWeight("nvfp4", ComputeMode::kW4A4, w, out, in, 448.0f),
             kSmallMs, seed, ctx);
  CheckLayer("nvfp4 w4a4 dynamic", CodecWeight("nvfp4", ComputeMode::kW4A4, w, out, in, 0.0f),
             kSmallMs, seed + 1, ctx);
}

// The four Qwen3-4B projections (hidden 2560, q 4096, kv 1024, MLP 9728), at a prefill-like m.
TEST(Linear, Qwen3LayerShapesMatchCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  LinearContext ctx;
  const Case shapes[] = {{77, 6144, 2560}, {77, 2560, 4096}, {77, 19456, 2560}, {77, 2560, 9728}};
  for (const Case& c : shapes) {
    const std::vector<float> w = RandomFloats(c.out * c.in, seed + c.out + c.in, 0.02f);
    CheckLayer("qwen bf16", gpu_test::Bf16Weight(w, c.out, c.in), {c.m}, seed, ctx);
    CheckLayer("qwen fp8", CodecWeight("fp8", ComputeMode::kW8A8, w, c.out, c.in), {c.m}, seed, ctx,
               kSumRelFp8);
    CheckLayer("qwen nvfp4 static",
               CodecWeight("nvfp4", ComputeMode::kW4A4, w, c.out, c.in, 2688.0f / 4.0f), {c.m},
               seed, ctx);
  }
}

TEST(Linear, WeightOnlyDispatchMatchesCpu) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t out = 512, in = 1024;
  const std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  LinearContext ctx;
  for (const char* scheme : {"int4", "nvfp4"}) {
    const LinearWeight lw = CodecWeight(scheme, ComputeMode::kWeightOnly, w, out, in, 0.0f, 128);
    if (!SupportsWeightOnly(lw)) {
      ADD_FAILURE() << scheme << " weight-only has no device implementation";
      continue;
    }
    // m <= 8: the GEMV (fp32 from the stored weights); m > 8: bf16-dequantized weights.
    CheckLayer(scheme, lw, {1, 8}, seed, ctx);
    CheckLayer(scheme, lw, {9, 77}, seed + 1, ctx, 0x1p-9 + kSumRel);
  }
}

TEST(Linear, CapturedGraphMatchesEager) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t m = 96, out = 512, in = 1024;
  const std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  const DeviceLinear fp8 = UploadLinear(CodecWeight("fp8", ComputeMode::kW8A8, w, out, in)).value();
  const DeviceLinear nv =
      UploadLinear(CodecWeight("nvfp4", ComputeMode::kW4A4, w, out, in, 0.0f)).value();
  DeviceBuffer dx = DeviceBuffer::From(ToBf16(RoundBf16(RandomFloats(m * in, seed + 1))));
  DeviceBuffer eager(2 * 2 * m * out), graphed(2 * 2 * m * out);
  LinearContext ctx;
  ctx.Reserve(m, in, out);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto run = [&](DeviceBuffer& y) {
    LinearArgs a;
    a.x = dx.get<__nv_bfloat16>();
    a.m = m;
    a.y_bf16 = y.get<__nv_bfloat16>();
    LinearForward(fp8, a, ctx, stream);
    a.y_bf16 += m * out;
    LinearForward(nv, a, ctx, stream);
  };
  run(eager);  // also builds the cuBLASLt plans outside capture
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run(graphed);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto a = eager.ToHost<uint16_t>(), b = graphed.ToHost<uint16_t>();
  EXPECT_EQ(a, b) << "graph replay differs from the eager forward";
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(Linear, UploadRejectsUndefinedModes) {
  const std::vector<float> w(64 * 32, 0.5f);
  auto r = UploadLinear(CodecWeight("int4", ComputeMode::kW8A8, w, 64, 32, 0.0f, 32));
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace dq::cuda
