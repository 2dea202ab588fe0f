// Timing of the weight-only decode GEMV on the Qwen3-4B shapes (not asserted; printed, and
// written as JSON to $OUT/weight_only_bench.json when OUT is set). Per format and shape, m = 1
// and 8: "isolated" (each launch timed alone, so each pays its own ramp-up and tail) and
// "streamed" (a CUDA graph of back-to-back launches over copies of the matrix, > L2 in total,
// overlapping through programmatic dependent launch). Then a 36-layer decode step
// (qkv, o, gate_up, down per layer, all distinct copies, one graph) gives the implied tok/s
// from weights alone, and the bf16 lm_head GEMV its own figure.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/cuda/weight_only.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/weight_only_test_util.h"

namespace dq::cuda {
namespace {

constexpr double kRooflineGBs = 4300.0;
constexpr int kLayers = 36;
struct Shape {
  const char* name;
  int64_t out, in;
};
constexpr Shape kShapes[] = {
    {"qkv", 6144, 2560}, {"o", 2560, 4096}, {"gate_up", 19456, 2560}, {"down", 2560, 9728}};

DeviceBuffer CloneBuffer(const DeviceBuffer& b) {
  DeviceBuffer c(b.bytes());
  if (b.bytes() > 0) CUDA_CHECK(cudaMemcpy(c.get(), b.get(), b.bytes(), cudaMemcpyDeviceToDevice));
  return c;
}
WeightOnlyWeights Clone(const WeightOnlyWeights& w) {
  WeightOnlyWeights c;
  c.format = w.format;
  c.bits = w.bits;
  c.group_size = w.group_size;
  c.gguf_type = w.gguf_type;
  c.out_features = w.out_features;
  c.in_features = w.in_features;
  c.global_scale = w.global_scale;
  c.packed = CloneBuffer(w.packed);
  c.scales = CloneBuffer(w.scales);
  c.aux = CloneBuffer(w.aux);
  return c;
}

struct Io {
  DeviceBuffer x, y;
  WeightOnlyGemvArgs Args(int m) const {
    WeightOnlyGemvArgs a;
    a.x = x.get<__nv_bfloat16>();
    a.m = m;
    a.y_bf16 = y.get<__nv_bfloat16>();
    return a;
  }
};
Io MakeIo(int64_t max_in, int64_t max_out) {
  Io io{DeviceBuffer(8 * max_in * 2), DeviceBuffer(8 * max_out * 2)};
  CUDA_CHECK(cudaMemset(io.x.get(), 0, io.x.bytes()));
  return io;
}

// Milliseconds per replay of a graph of `launch(stream)`, averaged over `reps` replays.
template <class F>
double GraphMs(F launch, int reps) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(s);
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_CHECK(cudaGraphLaunch(ge, s));  // warm-up
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, s));
  for (int i = 0; i < reps; ++i) CUDA_CHECK(cudaGraphLaunch(ge, s));
  CUDA_CHECK(cudaEventRecord(e1, s));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  CUDA_CHECK(cudaGraphExecDestroy(ge));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  CUDA_CHECK(cudaStreamDestroy(s));
  return ms / reps;
}

// Mean milliseconds of one launch timed alone (events around each), over all copies.
double IsolatedMs(const std::vector<WeightOnlyWeights>& copies, const Io& io, int m) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  double total = 0;
  for (const auto& w : copies) {
    CUDA_CHECK(cudaEventRecord(e0, nullptr));
    WeightOnlyGemv(w, io.Args(m), nullptr);
    CUDA_CHECK(cudaEventRecord(e1, nullptr));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    total += ms;
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  return total / copies.size();
}

std::string Fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

TEST(WeightOnlyBench, Qwen3_4BShapes) {
  DQ_REQUIRE_GPU();
  std::string json = "{\n  \"roofline_GBs\": 4300,\n  \"formats\": [\n";
  const Io io = MakeIo(9728, 151936);
  bool first_format = true;
  // DQ_WO_BENCH_FORMATS (comma-separated names) restricts the formats timed.
  const char* only = std::getenv("DQ_WO_BENCH_FORMATS");
  for (const auto& f : wo_test::AllFormats()) {
    if (only != nullptr &&
        ("," + std::string(only) + ",").find("," + f.name + ",") == std::string::npos) {
      continue;
    }
    std::vector<WeightOnlyWeights> layer;
    for (const Shape& s : kShapes) {
      auto hw = wo_test::MakeZeroWeight(f, s.out, s.in);
      layer.push_back(UploadWeightOnly(hw.w).value());
    }
    json += std::string(first_format ? "" : ",\n") + "    {\"format\": \"" + f.name +
            "\", \"shapes\": [";
    first_format = false;
    int64_t layer_bytes = 0;
    for (size_t i = 0; i < layer.size(); ++i) {
      const int64_t bytes = layer[i].device_bytes();
      layer_bytes += bytes;
      const int64_t ncopy = std::max<int64_t>(2, (384LL << 20) / bytes + 1);
      std::vector<WeightOnlyWeights> copies;
      for (int64_t c = 0; c < ncopy; ++c) copies.push_back(Clone(layer[i]));
      for (int m : {1, 8}) {
        const double iso = IsolatedMs(copies, io, m);
        const double str = GraphMs(
                               [&](cudaStream_t st) {
                                 for (const auto& w : copies) WeightOnlyGemv(w, io.Args(m), st);
                               },
                               3) /
                           ncopy;
        const double gbi = bytes / iso / 1e6, gbs = bytes / str / 1e6;
        std::printf(
            "%-10s %-8s m=%d  %6.2f MB  isolated %7.2f us %6.0f GB/s (%4.1f%%)  "
            "streamed %7.2f us %6.0f GB/s (%4.1f%%)\n",
            f.name.c_str(), kShapes[i].name, m, bytes / 1e6, iso * 1e3, gbi,
            100 * gbi / kRooflineGBs, str * 1e3, gbs, 100 * gbs / kRooflineGBs);
        json += std::string(i == 0 && m == 1 ? "" : ", ") + "{\"shape\": \"" + kShapes[i].name +
                "\", \"m\": " + std::to_string(m) + Fmt(", \"MB\": %.3f", bytes / 1e6) +
                Fmt(", \"isolated_us\": %.3f, \"isolated_GBs\": %.1f", iso * 1e3, gbi) +
                Fmt(", \"streamed_us\": %.3f, \"streamed_GBs\": %.1f}", str * 1e3, gbs);
      }
    }
    // 36 distinct layers (the last one being the uploaded one), one graph per decode step.
    std::vector<std::vector<WeightOnlyWeights>> model(kLayers - 1);
    for (auto& l : model) {
      for (const auto& w : layer) l.push_back(Clone(w));
    }
    model.push_back(std::move(layer));
    json += "]";
    for (int m : {1, 8}) {
      const double ms = GraphMs(
          [&](cudaStream_t st) {
            for (const auto& l : model) {
              for (const auto& w : l) WeightOnlyGemv(w, io.Args(m), st);
            }
          },
          5);
      const double gbs = kLayers * layer_bytes / ms / 1e6;
      std::printf(
          "%-10s 36-layer step m=%d: %8.1f us  %6.0f GB/s (%4.1f%%)  %6.0f tok/s "
          "(roofline %6.0f)\n",
          f.name.c_str(), m, ms * 1e3, gbs, 100 * gbs / kRooflineGBs, 1e3 / ms,
          kRooflineGBs * 1e9 / (kLayers * layer_bytes));
      const std::string k = ", \"layers36_m" + std::to_string(m);
      json += k + Fmt("_us\": %.2f", ms * 1e3) + k + Fmt("_GBs\": %.1f", gbs) + k +
              Fmt("_tok_s\": %.1f", 1e3 / ms);
    }
    json += "}";
  }
  // lm_head in bf16.
  {
    wo_test::FormatSpec bf16{"bf16", "", 0, DType::kBF16, 16};
    auto hw = wo_test::MakeZeroWeight(bf16, 151936, 2560);
    std::vector<WeightOnlyWeights> copies;
    copies.push_back(UploadWeightOnly(hw.w).value());
    copies.push_back(Clone(copies[0]));
    const int64_t bytes = copies[0].device_bytes();
    json += "\n  ],\n  \"lm_head_bf16\": [";
    for (int m : {1, 8}) {
      const double str = GraphMs(
                             [&](cudaStream_t st) {
                               for (const auto& w : copies) WeightOnlyGemv(w, io.Args(m), st);
                             },
                             5) /
                         2;
      const double gbs = bytes / str / 1e6;
      std::printf("lm_head bf16 m=%d: %8.1f us  %6.0f GB/s (%4.1f%%)\n", m, str * 1e3, gbs,
                  100 * gbs / kRooflineGBs);
      json += std::string(m == 1 ? "" : ", ") + "{\"m\": " + std::to_string(m) +
              Fmt(", \"us\": %.2f, \"GBs\": %.1f}", str * 1e3, gbs);
    }
    json += "]\n}\n";
  }
  if (const char* out = std::getenv("OUT"); out != nullptr) {
    std::ofstream(std::string(out) + "/weight_only_bench.json") << json;
  }
}

}  // namespace
}  // namespace dq::cuda
