// The Blackwell-native NVFP4 W4A4 path (issue 5): the packed activation quantizer against the
// CPU codec byte for byte, the tiled scale layout on the device, the path selection, and the
// whole linear layer against the CPU reference. Everything but NativeFp4GemmMatchesCpu runs on
// Hopper too (the native path's operands then go through the bf16 stand-in);
// NativeFp4GemmMatchesCpu needs compute capability >= 10.0 and skips elsewhere.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cuda/act_quant.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/linear.h"
#include "engine/cuda/linear_kernels.h"
#include "engine/cuda/nvfp4_path.h"
#include "engine/quant/nvfp4_activation.h"
#include "engine/quant/nvfp4_scale_layout.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/linear_test_util.h"

namespace dq::cuda {
namespace {

using gpu_test::FreshSeed;
using gpu_test::RandomFloats;

int ComputeMajor() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// bf16-exact activations with per-row magnitudes 2^-6..2^6 and the values that test the
// encoder's edges: an all-zero block, signed zeros, an outlier, +-inf, NaN.
std::vector<float> Activations(int64_t m, int64_t n, uint64_t seed) {
  std::vector<float> x = RandomFloats(m * n, seed);
  for (int64_t r = 0; r < m; ++r) {
    float* row = x.data() + r * n;
    for (int64_t i = 0; i < n; ++i) row[i] *= std::ldexp(1.0f, static_cast<int>(r % 13) - 6);
    if (n >= 32 && r % 3 == 0) std::fill(row + 16, row + 32, 0.0f);
    row[n - 1] = (r % 2) ? -0.0f : 0.0f;
    if (r % 4 == 1) row[1] *= 300.0f;
    if (r % 5 == 2) row[2] = std::numeric_limits<float>::infinity();
    if (r % 5 == 3) row[3] = -std::numeric_limits<float>::infinity();
    if (r % 7 == 4) row[4] = std::numeric_limits<float>::quiet_NaN();
  }
  return gpu_test::RoundBf16(x);
}

TEST(Nvfp4Native, PackedActivationsMatchCpuByteForByte) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t shapes[][2] = {{1, 16},   {1, 2560},  {3, 48},     {77, 1024},
                               {128, 64}, {129, 272}, {300, 9728}, {513, 2560}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], nb = n / 16;
    const std::vector<float> x = Activations(m, n, seed + m * 7 + n);
    DeviceBuffer dx = DeviceBuffer::From(gpu_test::ToBf16(x));
    for (const float static_g : {0.0f, 448.0f, 2688.0f / 3.0f}) {
      SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " static G " << static_g);
      // Scales and padding start as 0xAB, so padding the kernel leaves unwritten shows.
      const int64_t scale_bytes = TiledScaleBytes(m, nb);
      DeviceBuffer packed(static_cast<size_t>(m * n / 2));
      DeviceBuffer scales =
          DeviceBuffer::From(std::vector<uint8_t>(static_cast<size_t>(scale_bytes), 0xAB));
      DeviceBuffer inv_g(static_cast<size_t>(4 * m));
      Nvfp4PackedActivations a;
      a.x = dx.get<__nv_bfloat16>();
      a.m = m;
      a.n = n;
      a.act_global_scale = static_g;
      a.packed = packed.get<uint8_t>();
      a.tiled_scales = scales.get<uint8_t>();
      a.inv_global = inv_g.get<float>();
      QuantizeNvfp4Packed(a, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint8_t> got_packed = packed.ToHost<uint8_t>();
      const std::vector<uint8_t> got_scales = scales.ToHost<uint8_t>();
      const std::vector<float> got_inv = inv_g.ToHost<float>();
      std::vector<uint8_t> ref_packed(static_cast<size_t>(m * n / 2));
      std::vector<uint8_t> ref_scales(static_cast<size_t>(m * nb));
      for (int64_t r = 0; r < m; ++r) {
        const float g =
            PackNvfp4ActivationRow(x.data() + r * n, n, static_g, ref_packed.data() + r * n / 2,
                                   ref_scales.data() + r * nb);
        ASSERT_EQ(Bits(got_inv[r]), Bits(1.0f / g)) << "row " << r;
      }
      for (size_t i = 0; i < ref_packed.size(); ++i) {
        ASSERT_EQ(got_packed[i], ref_packed[i])
            << "packed byte " << i << " (row " << i / (n / 2) << ")";
      }
      const std::vector<uint8_t> ref_tiled = ScalesToTiled(ref_scales.data(), m, nb);
      ASSERT_EQ(got_scales.size(), ref_tiled.size());
      for (size_t i = 0; i < ref_tiled.size(); ++i) {
        ASSERT_EQ(got_scales[i], ref_tiled[i]) << "tiled scale byte " << i;
      }
    }
  }
}

TEST(Nvfp4Native, TiledUnpackMatchesRowMajorUnpack) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const int64_t rows = 333, cols = 1040, nb = cols / 16;
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2)), scales(rows * nb);
  uint64_t s = seed | 1;
  auto next = [&] { return s ^= s << 13, s ^= s >> 7, s ^= s << 17, s; };
  for (uint8_t& b : packed) b = static_cast<uint8_t>(next());
  for (uint8_t& b : scales) b = static_cast<uint8_t>(next() % 0x7E);  // finite UE4M3
  DeviceBuffer dp = DeviceBuffer::From(packed), ds = DeviceBuffer::From(scales);
  DeviceBuffer dt = DeviceBuffer::From(ScalesToTiled(scales.data(), rows, nb));
  DeviceBuffer a(2 * rows * cols), b(2 * rows * cols);
  UnpackNvfp4ToBf16(dp.get<uint8_t>(), ds.get<uint8_t>(), rows, cols, a.get<__nv_bfloat16>(),
                    nullptr);
  UnpackNvfp4TiledToBf16(dp.get<uint8_t>(), dt.get<uint8_t>(), rows, cols, b.get<__nv_bfloat16>(),
                         nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(a.ToHost<uint16_t>(), b.ToHost<uint16_t>());
}

TEST(Nvfp4Native, PathSelection) {
  // KernelOptions::nvfp4_gemm: auto by compute capability, or forced either way.
  EXPECT_EQ(ResolveNvfp4Path(9, Nvfp4Gemm::kAuto), Nvfp4Path::kUnpackBf16);
  EXPECT_EQ(ResolveNvfp4Path(10, Nvfp4Gemm::kAuto), Nvfp4Path::kNativeFp4);
  EXPECT_EQ(ResolveNvfp4Path(12, Nvfp4Gemm::kAuto), Nvfp4Path::kNativeFp4);
  EXPECT_EQ(ResolveNvfp4Path(10, Nvfp4Gemm::kUnpack), Nvfp4Path::kUnpackBf16);
  EXPECT_EQ(ResolveNvfp4Path(9, Nvfp4Gemm::kNative), Nvfp4Path::kNativeFp4);
  EXPECT_EQ(ParseKernelOptions("nvfp4_gemm=native").value().nvfp4_gemm, Nvfp4Gemm::kNative);
  const auto bad = ParseKernelOptions("nvfp4_gemm=fp4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("native or unpack"), std::string::npos) << bad.status();
  DQ_REQUIRE_GPU();
  for (const Nvfp4Gemm g : {Nvfp4Gemm::kAuto, Nvfp4Gemm::kNative, Nvfp4Gemm::kUnpack}) {
    EXPECT_EQ(Nvfp4PathForCurrentDevice(g), ResolveNvfp4Path(ComputeMajor(), g))
        << Nvfp4GemmName(g);
  }
  std::printf("this device: compute capability major %d -> %s\n", ComputeMajor(),
              Nvfp4PathName(Nvfp4PathForCurrentDevice(Nvfp4Gemm::kAuto)));
  // UploadLinear with kernel options takes the path they give.
  const std::vector<float> w = RandomFloats(64 * 64, FreshSeed(), 0.05f);
  const LinearWeight lw = gpu_test::CodecWeight("nvfp4", ComputeMode::kW4A4, w, 64, 64, 0.0f);
  KernelOptions k;
  k.nvfp4_gemm = Nvfp4Gemm::kNative;
  EXPECT_EQ(UploadLinear(lw, k).value().kind, LinearKind::kNvfp4W4A4Native);
  k.nvfp4_gemm = Nvfp4Gemm::kUnpack;
  EXPECT_EQ(UploadLinear(lw, k).value().kind, LinearKind::kNvfp4W4A4);
}

// The layer on the given path against the CPU reference, bf16 output and fp32 accumulate.
void CheckNvfp4Layer(const char* name, Nvfp4Path path, int64_t out, int64_t in,
                     float act_global_scale, const std::vector<int64_t>& ms, uint64_t seed,
                     double sum_rel) {
  const std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  const LinearWeight lw =
      gpu_test::CodecWeight("nvfp4", ComputeMode::kW4A4, w, out, in, act_global_scale);
  const auto up = UploadLinear(lw, path);
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_EQ(up->kind,
            path == Nvfp4Path::kNativeFp4 ? LinearKind::kNvfp4W4A4Native : LinearKind::kNvfp4W4A4);
  LinearContext ctx;
  for (const int64_t m : ms) {
    SCOPED_TRACE(testing::Message() << name << " m " << m << " [" << out << " x " << in << "]");
    std::vector<float> x = RandomFloats(m * in, seed + m);
    for (int64_t t = 0; t < m; ++t) {
      for (int64_t i = 0; i < in; ++i) x[t * in + i] *= std::ldexp(1.0f, (t * 3) % 9 - 4);
    }
    x = gpu_test::RoundBf16(x);
    const gpu_test::Reference ref = gpu_test::CpuReference(lw, x, m);
    DeviceBuffer dx = DeviceBuffer::From(gpu_test::ToBf16(x));
    DeviceBuffer dy(2 * m * out);
    LinearArgs a;
    a.x = dx.get<__nv_bfloat16>();
    a.m = m;
    a.y_bf16 = dy.get<__nv_bfloat16>();
    LinearForward(*up, a, ctx, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const gpu_test::ErrorReport e =
        gpu_test::Compare(gpu_test::FromBf16(dy.ToHost<__nv_bfloat16>()), ref, 0x1p-8, sum_rel);
    std::printf("%-28s m %5lld [%5lld x %5lld]: rel %.3g, err/bound %.3g\n", name,
                static_cast<long long>(m), static_cast<long long>(out), static_cast<long long>(in),
                e.rel, e.worst_ratio);
    EXPECT_LE(e.worst_ratio, 1.0) << "worst at " << e.worst_index;
    if (m != ms.front()) continue;
    const std::vector<float> y0 = RandomFloats(m * out, seed + 7);
    DeviceBuffer dacc = DeviceBuffer::From(y0);
    a.y_bf16 = nullptr;
    a.y_accumulate = dacc.get<float>();
    LinearForward(*up, a, ctx, nullptr);
    const std::vector<float> got = dacc.ToHost<float>();
    gpu_test::Reference shifted = ref;
    for (size_t i = 0; i < got.size(); ++i) shifted.y[i] += y0[i];
    const gpu_test::ErrorReport ea = gpu_test::Compare(got, shifted, 0x1p-22, sum_rel);
    EXPECT_LE(ea.worst_ratio, 1.0) << "accumulate: worst at " << ea.worst_index;
  }
}

// Static and dynamic G_a; [57344 x 128] at m 300 makes the dynamic epilogue run in two row
// chunks (256 + 44), so the activation block scales are entered mid-tensor.
void CheckNativePath(double sum_rel) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const Nvfp4Path p = Nvfp4Path::kNativeFp4;
  CheckNvfp4Layer("native static", p, 256, 1024, 448.0f, {1, 3, 8, 77, 512}, seed, sum_rel);
  CheckNvfp4Layer("native dynamic", p, 256, 1024, 0.0f, {1, 3, 8, 77, 512}, seed + 1, sum_rel);
  CheckNvfp4Layer("native qwen qkv static", p, 6144, 2560, 2688.0f / 4.0f, {77}, seed + 2, sum_rel);
  CheckNvfp4Layer("native qwen down dynamic", p, 2560, 9728, 0.0f, {77}, seed + 3, sum_rel);
  CheckNvfp4Layer("native chunked dynamic", p, 57344, 128, 0.0f, {300}, seed + 4, sum_rel);
}

// On every device: the native path's stored operands (tiled weight scales, packed activations)
// give the CPU's result; on Hopper through the bf16 stand-in (bf16 GEMM: fp32 summation bound).
TEST(Nvfp4Native, NativePathOperandsMatchCpu) {
  DQ_REQUIRE_GPU();
  if (ComputeMajor() >= 10) GTEST_SKIP() << "FP4 tensor cores present: NativeFp4GemmMatchesCpu";
  CheckNativePath(0x1p-17);
}

// Blackwell (compute capability >= 10.0): cuBLASLt's block-scaled FP4 GEMM itself. Its
// tensor cores accumulate the exact E2M1 x E2M1 x scale products like Hopper's FP8 ones may (in
// reduced precision within an MMA), hence the FP8 bound 2^-11 sum |x w|.
TEST(Nvfp4Native, NativeFp4GemmMatchesCpu) {
  DQ_REQUIRE_GPU();
  const int major = ComputeMajor();
  if (major < 10) {
    GTEST_SKIP() << "compute capability " << major
                 << ".x has no FP4 tensor cores: the native NVFP4 GEMM needs 10.0+ (Blackwell); "
                    "its operands are checked on this device by NativePathOperandsMatchCpu";
  }
  // The FP4 plan must exist here, or the layer would silently run the bf16 stand-in.
  GemmLt gemm;
  DeviceBuffer x(64 * 1024 / 2), w(256 * 1024 / 2), y(2 * 64 * 256);
  DeviceBuffer xs(TiledScaleBytes(64, 64)), ws(TiledScaleBytes(256, 64));
  GemmArgs g;
  g.input = GemmInput::kE2M1;
  g.m = 64, g.n = 256, g.k = 1024;
  g.x = x.get(), g.w = w.get();
  g.x_block_scale = xs.get<uint8_t>(), g.w_block_scale = ws.get<uint8_t>();
  g.y_bf16 = y.get<__nv_bfloat16>();
  ASSERT_TRUE(gemm.Supported(g)) << "cuBLASLt reports no block-scaled FP4 GEMM on this device";
  CheckNativePath(0x1p-11);
}

TEST(Nvfp4Native, CapturedGraphMatchesEager) {
  DQ_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  const int64_t m = 96, out = 512, in = 1024;
  const std::vector<float> w = RandomFloats(out * in, seed, 0.05f);
  const DeviceLinear nv =
      UploadLinear(gpu_test::CodecWeight("nvfp4", ComputeMode::kW4A4, w, out, in, 0.0f),
                   Nvfp4Path::kNativeFp4)
          .value();
  DeviceBuffer dx =
      DeviceBuffer::From(gpu_test::ToBf16(gpu_test::RoundBf16(RandomFloats(m * in, seed + 1))));
  DeviceBuffer eager(2 * m * out), graphed(2 * m * out);
  LinearContext ctx;
  KernelOptions native;  // Reserve sizes the native path's scratch for the option
  native.nvfp4_gemm = Nvfp4Gemm::kNative;
  ctx.SetOptions(native);
  ctx.Reserve(m, in, out);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto run = [&](DeviceBuffer& y) {
    LinearArgs a;
    a.x = dx.get<__nv_bfloat16>();
    a.m = m;
    a.y_bf16 = y.get<__nv_bfloat16>();
    LinearForward(nv, a, ctx, stream);
  };
  run(eager);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run(graphed);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(eager.ToHost<uint16_t>(), graphed.ToHost<uint16_t>());
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace dq::cuda
