// Whole-model check: the CUDA backend's logits against the CPU backend's on the same checkpoint
// (SmolLM2 Q4_1 GGUF, the tiny random Qwen3), through prefill (one shot and chunked) and a few
// decode steps fed the same tokens. Top-1 must agree wherever the CPU's top two are not a near
// tie; the largest |Δlogit| is printed for the record. (The compute modes and mixed phases:
// compute_mode_model_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

class ModelOnGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelOnGpu, LogitsMatchTheCpuBackend) {
  DQ_REQUIRE_GPU();
  const std::string path = gpu_test::TestModelPath(GetParam());
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  auto cpu = ModelRunner::Create(*m.checkpoint, m.config, ro);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ro.backend = cuda::CudaBackendFactory();
  auto gpu = ModelRunner::Create(*m.checkpoint, m.config, ro);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ((*gpu)->backend(), "cuda");

  const uint64_t seed = gpu_test::FreshSeed();
  gpu_test::PhaseComparison cmp;
  gpu_test::RunBothAndCompare(**cpu, **gpu, gpu_test::MixedPrompt(m, seed), 8, &cmp);
  if (HasFatalFailure()) return;
  gpu_test::ExpectClose(GetParam(), seed, gpu_test::Merged(cmp));
}

INSTANTIATE_TEST_SUITE_P(Models, ModelOnGpu, ::testing::Values("tiny_qwen3", "smollm2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dq
