// Timing of LinearForward on the Qwen3-4B projections (not asserted): TFLOP/s of bf16, fp8 W8A8
// (activation quantization included) and nvfp4 W4A4 (activation quantize-dequantize and weight
// unpack included) at m = 512, 2048, 8192, beside the cuBLASLt ceilings measured on this machine
// (bf16 665-803, FP8 1267-1489 TFLOP/s). Printed, and written as JSON to $OUT/linear_timing.json
// when OUT is set.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cuda/act_quant.h"
#include "engine/cuda/device_buffer.h"
#include "engine/cuda/gemm_lt.h"
#include "engine/cuda/linear.h"
#include "engine/cuda/linear_kernels.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/linear_test_util.h"

namespace dq::cuda {
namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};

template <typename F>
double TimeMs(F&& f, cudaStream_t stream, int reps) {
  for (int i = 0; i < 2; ++i) f();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < reps; ++i) f();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms / reps;
}

// Where the time of the quantized kinds goes at m tokens: the activation quantizer, the NVFP4
// weight unpack, and the FP8 GEMM alone (its scales applied by cuBLASLt).
void PrintBreakdown(const char* shape, const DeviceLinear& fp8, const DeviceLinear& nv,
                    const __nv_bfloat16* x, int64_t m, cudaStream_t s) {
  const int64_t out = fp8.out_features, in = fp8.in_features;
  DeviceBuffer q(m * in), sc(4 * m), xq(2 * m * in), wb(2 * out * in), y(2 * m * out);
  const double t_q8 = TimeMs(
      [&] { QuantizeFp8PerToken(x, m, in, q.get<__nv_fp8_e4m3>(), sc.get<float>(), s); }, s, 10);
  GemmLt lt;
  GemmArgs g;
  g.input = GemmInput::kE4M3;
  g.m = m, g.n = out, g.k = in;
  g.x = q.get(), g.w = fp8.weight.get();
  g.x_scale = sc.get<float>(), g.w_scale = fp8.weight_scale.get<float>();
  g.y_bf16 = y.get<__nv_bfloat16>();
  const double t_g8 = TimeMs([&] { lt.Run(g, s); }, s, 10);
  const double t_unpack = TimeMs(
      [&] {
        UnpackNvfp4ToBf16(nv.weight.get<uint8_t>(), nv.weight_scale.get<uint8_t>(), out, in,
                          wb.get<__nv_bfloat16>(), s);
      },
      s, 10);
  const double t_q4 = TimeMs(
      [&] { QuantDequantNvfp4(x, m, in, 448.0f, xq.get<__nv_bfloat16>(), sc.get<float>(), s); }, s,
      10);
  std::printf(
      "breakdown %-8s m %lld: fp8 act-quant %.4f ms, fp8 GEMM alone %.4f ms (%.1f TFLOP/s); "
      "nvfp4 weight unpack %.4f ms, act quant-dequant %.4f ms\n",
      shape, static_cast<long long>(m), t_q8, t_g8, 2.0 * m * out * in / (t_g8 * 1e9), t_unpack,
      t_q4);
}

TEST(LinearTiming, Qwen3ShapesTflops) {
  DQ_REQUIRE_GPU();
  const Shape shapes[] = {
      {"qkv", 6144, 2560}, {"o", 2560, 4096}, {"gate_up", 19456, 2560}, {"down", 2560, 9728}};
  const int64_t ms[] = {512, 2048, 8192};
  const int64_t max_m = 8192, max_in = 9728, max_out = 19456;
  LinearContext ctx;
  ctx.Reserve(max_m, max_in, max_out);
  std::vector<float> xh = gpu_test::FastRandom(max_m * max_in, 1, 1.0f);
  DeviceBuffer dx = DeviceBuffer::From(gpu_test::ToBf16(xh));
  xh.clear();
  DeviceBuffer dy(2 * max_m * max_out);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::string json = "[\n";
  std::printf("%-8s %-10s %6s %10s %10s\n", "kind", "shape", "m", "ms", "TFLOP/s");
  for (const Shape& s : shapes) {
    const std::vector<float> w = gpu_test::FastRandom(s.out * s.in, s.out + s.in, 0.05f);
    struct Kind {
      const char* name;
      DeviceLinear d;
    };
    std::vector<Kind> kinds;
    kinds.push_back({"bf16", UploadLinear(gpu_test::Bf16Weight(w, s.out, s.in)).value()});
    kinds.push_back(
        {"fp8",
         UploadLinear(gpu_test::CodecWeight("fp8", ComputeMode::kW8A8, w, s.out, s.in)).value()});
    kinds.push_back({"nvfp4", UploadLinear(gpu_test::CodecWeight("nvfp4", ComputeMode::kW4A4, w,
                                                                 s.out, s.in, 448.0f))
                                  .value()});
    for (Kind& k : kinds) {
      for (const int64_t m : ms) {
        LinearArgs a;
        a.x = dx.get<__nv_bfloat16>();
        a.m = m;
        a.y_bf16 = dy.get<__nv_bfloat16>();
        const double t = TimeMs([&] { LinearForward(k.d, a, ctx, stream); }, stream, 10);
        const double tflops = 2.0 * m * s.out * s.in / (t * 1e-3) / 1e12;
        std::printf("%-8s %-10s %6lld %10.4f %10.1f\n", k.name, s.name, static_cast<long long>(m),
                    t, tflops);
        json += "  {\"kind\": \"" + std::string(k.name) + "\", \"shape\": \"" + s.name +
                "\", \"m\": " + std::to_string(m) + ", \"n\": " + std::to_string(s.out) +
                ", \"k\": " + std::to_string(s.in) + ", \"ms\": " + std::to_string(t) +
                ", \"tflops\": " + std::to_string(tflops) + "},\n";
      }
    }
    PrintBreakdown(s.name, kinds[1].d, kinds[2].d, dx.get<__nv_bfloat16>(), 8192, stream);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  if (json.size() > 2) json.erase(json.size() - 2, 1);  // the last comma
  json += "]\n";
  std::printf("ceilings (cuBLASLt, this machine): bf16 665-803, FP8 1267-1489 TFLOP/s\n");
  if (const char* out = std::getenv("OUT"); out != nullptr) {
    const std::string path = std::string(out) + "/linear_timing.json";
    if (FILE* f = std::fopen(path.c_str(), "w"); f != nullptr) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
}

}  // namespace
}  // namespace dq::cuda
