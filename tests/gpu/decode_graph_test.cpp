// Decode steps replayed from their CUDA graphs against the same steps run eagerly: the graph
// holds the same kernels on the same buffers, so the logits must be bitwise equal, at batch 1
// and at batch 3, over several steps (the first captures, the rest replay with the new token ids,
// positions and block tables read from the refreshed metadata). The graph path must actually
// be taken (captured_decode_batches).
//
// No host synchronisation inside a captured step: the model captures in
// cudaStreamCaptureModeThreadLocal and CUDA_CHECKs cudaStreamEndCapture, and in that mode a
// synchronising call made by the capturing thread (stream or device synchronize, cudaMalloc)
// fails and invalidates the capture, so a step that synchronised could not be captured: the
// replay test would abort. CaptureRejectsHostSynchronisation checks that premise on this
// driver.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/cuda/cuda_model.h"
#include "engine/cuda/device_buffer.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

struct GraphCase {
  std::string model;   // "tiny_qwen3" or "smollm2"
  std::string format;  // empty: as stored; else quantized here to this scheme
  int group_size;      // intN's group; 0: the scheme's own (fp8 per channel, nvfp4 blocks of 16)
  ComputeMode mode;
  std::string name;
};

std::unique_ptr<ModelRunner> MakeRunner(const Model& m, ComputeMode mode, bool graphs) {
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  cuda::CudaBackendOptions co;
  co.use_graphs = graphs;
  ro.backend = cuda::CudaBackendFactory(co);
  const PhaseWeights w{m.checkpoint.get(), &m.config, mode};
  auto r = ModelRunner::Create(w, w, ro);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

std::vector<int> CapturedBatches(const ModelRunner& r) {
  return dynamic_cast<const cuda::CudaDecoderModel&>(r.forward_model(Phase::kDecode))
      .captured_decode_batches();
}

// Logits that differ (bitwise) and the largest difference; sizes that differ count as -1.
gpu_test::Mismatch BitwiseCompare(const BatchLogits& a, const BatchLogits& b) {
  if (a.values.size() != b.values.size()) return {-1, INFINITY};
  return gpu_test::BitwiseDiff(a.values.data(), b.values.data(),
                               static_cast<int64_t>(a.values.size()));
}

class DecodeGraph : public ::testing::TestWithParam<GraphCase> {};

TEST_P(DecodeGraph, ReplayEqualsEagerStepBitwise) {
  DQ_REQUIRE_GPU();
  const GraphCase& c = GetParam();
  const std::string path = gpu_test::TestModelPath(c.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto source = LoadModel(path);
  ASSERT_TRUE(source.ok()) << source.status();
  gpu_test::ScratchDir dir;
  std::unique_ptr<Model> quantized;
  if (!c.format.empty()) {
    auto q = gpu_test::QuantizedCopy(**source, dir.path(), c.format, c.format, c.group_size);
    ASSERT_TRUE(q.ok()) << q.status();
    quantized = std::move(*q);
  }
  const Model& m = quantized ? *quantized : **source;
  std::unique_ptr<ModelRunner> eager = MakeRunner(m, c.mode, false);
  std::unique_ptr<ModelRunner> graphed = MakeRunner(m, c.mode, true);
  ASSERT_TRUE(eager && graphed);
  const uint64_t seed = gpu_test::FreshSeed();
  constexpr int kSteps = 6;
  int64_t compared = 0;
  for (const int batch : {1, 3}) {
    SCOPED_TRACE(testing::Message() << c.name << " seed " << seed << " batch " << batch);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<KvSequence> ke(batch), kg(batch);
    for (int i = 0; i < batch; ++i) {
      prompts.push_back(gpu_test::MixedPrompt(m, seed + batch * 10 + i, 5 + 9 * i));
      const int need = static_cast<int>(prompts[i].size()) + kSteps;
      eager->kv_pool().extend(ke[i], need);
      graphed->kv_pool().extend(kg[i], need);
    }
    std::vector<int32_t> next(batch);
    for (int step = 0; step <= kSteps; ++step) {  // step 0: the prefill of every prompt
      Batch be{step == 0 ? Phase::kPrefill : Phase::kDecode, {}}, bg = be;
      for (int i = 0; i < batch; ++i) {
        const std::span<const int32_t> t = step == 0 ? std::span<const int32_t>(prompts[i])
                                                     : std::span<const int32_t>(&next[i], 1);
        be.items.push_back({&ke[i], t, false});
        bg.items.push_back({&kg[i], t, false});
      }
      BatchLogits le, lg;
      ASSERT_TRUE(eager->Forward(be, &le).ok());
      ASSERT_TRUE(graphed->Forward(bg, &lg).ok());
      const gpu_test::Mismatch mm = BitwiseCompare(le, lg);
      EXPECT_EQ(mm.values, 0) << "step " << step << ": " << mm.values
                              << " logits differ, max |dlogit| " << mm.max_abs;
      compared += static_cast<int64_t>(le.values.size());
      for (int i = 0; i < batch; ++i) next[i] = gpu_test::Argmax(le.last(i, be), le.vocab);
    }
    for (int i = 0; i < batch; ++i) {
      eager->kv_pool().release(ke[i]);
      graphed->kv_pool().release(kg[i]);
    }
  }
  EXPECT_EQ(CapturedBatches(*graphed), (std::vector<int>{1, 3})) << "the graph path was not taken";
  EXPECT_TRUE(CapturedBatches(*eager).empty());
  std::printf(
      "[%s graphs] seed %llu: %lld logits over %d decode steps at batch 1 and 3 "
      "(+ prefill), graph replay == eager bitwise: %s\n",
      c.name.c_str(), static_cast<unsigned long long>(seed), static_cast<long long>(compared),
      kSteps, HasFailure() ? "NO" : "yes");
}

INSTANTIATE_TEST_SUITE_P(
    Models, DecodeGraph,
    ::testing::Values(
        GraphCase{"tiny_qwen3", "", 0, ComputeMode::kWeightOnly, "tiny_qwen3"},
        GraphCase{"tiny_qwen3", "int4", 64, ComputeMode::kWeightOnly, "tiny_qwen3_int4"},
        GraphCase{"tiny_qwen3", "fp8", 0, ComputeMode::kW8A8, "tiny_qwen3_fp8_w8a8"},
        GraphCase{"tiny_qwen3", "nvfp4", 0, ComputeMode::kW4A4, "tiny_qwen3_nvfp4_w4a4"},
        GraphCase{"smollm2", "", 0, ComputeMode::kWeightOnly, "smollm2"}),
    [](const auto& info) { return info.param.name; });

// The premise of "a captured step does no host synchronisation": under the model's capture mode
// each of these calls from the capturing thread fails or invalidates the capture.
TEST(DecodeGraph, CaptureRejectsHostSynchronisation) {
  DQ_REQUIRE_GPU();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cuda::DeviceBuffer buf(1 << 20);
  struct Call {
    const char* name;
    cudaError_t (*fn)(cudaStream_t);
  };
  const Call calls[] = {
      {"cudaStreamSynchronize", [](cudaStream_t st) { return cudaStreamSynchronize(st); }},
      {"cudaDeviceSynchronize", [](cudaStream_t) { return cudaDeviceSynchronize(); }},
      {"cudaMalloc",
       [](cudaStream_t) {
         void* p = nullptr;
         const cudaError_t e = cudaMalloc(&p, 1 << 20);
         if (e == cudaSuccess) cudaFree(p);
         return e;
       }},
  };
  for (const Call& call : calls) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(buf.get(), 0, buf.bytes(), s), cudaSuccess);
    const cudaError_t during = call.fn(s);
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &g);
    if (g != nullptr) cudaGraphDestroy(g);
    (void)cudaGetLastError();  // clears the (non-sticky) capture errors
    std::printf("[capture] %s during capture: %s, end capture: %s\n", call.name,
                cudaGetErrorName(during), cudaGetErrorName(end));
    EXPECT_TRUE(during != cudaSuccess || end != cudaSuccess)
        << call.name << " was allowed inside a thread-local capture";
  }
  // The stream is usable again: a capture without such calls succeeds.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.get(), 0, buf.bytes(), s), cudaSuccess);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  if (g != nullptr) cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace dq
