// Whole-model check: the CUDA backend's logits against the CPU backend's on the same checkpoint
// (SmolLM2 Q4_1 GGUF, the tiny random Qwen3), through prefill (one shot and chunked) and a few
// decode steps fed the same tokens, on the mixed prompt and on plain text. Top-1 must agree
// wherever the CPU's top two are not a near tie; the largest |Δlogit| is printed for the record.
// (The compute modes and mixed phases: compute_mode_model_test.cpp.) Each model also with its
// lm_head quantized to int4 at load (PhaseWeights::lm_head, the decode worker's [decode] lm_head)
// on both backends.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

struct ModelCase {
  std::string model;    // "tiny_qwen3" or "smollm2"
  std::string lm_head;  // PhaseWeights::lm_head
  std::string name;
};

class ModelOnGpu : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelOnGpu, LogitsMatchTheCpuBackend) {
  DQ_REQUIRE_GPU();
  const ModelCase& mc = GetParam();
  const std::string path = gpu_test::TestModelPath(mc.model);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  ro.cpu_bf16_activations = true;  // the CPU rounds activations as CUDA stores them
  const PhaseWeights w{m.checkpoint.get(), &m.config, ComputeMode::kWeightOnly, mc.lm_head};
  auto cpu = ModelRunner::Create(w, w, ro);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ro.cpu_bf16_activations = false;
  ro.backend = cuda::CudaBackendFactory();
  auto gpu = ModelRunner::Create(w, w, ro);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ((*gpu)->backend(), "cuda");

  const uint64_t seed = gpu_test::FreshSeed();
  // The mixed prompt's random tokens leave SmolLM2 unsure (small top-2 gaps); plain text adds
  // rows a trained model is confident on.
  gpu_test::PhaseComparison mixed, text;
  gpu_test::RunBothAndCompare(**cpu, **gpu, gpu_test::MixedPrompt(m, seed), 8, &mixed);
  gpu_test::RunBothAndCompare(**cpu, **gpu, gpu_test::TextPrompt(m), 8, &text);
  if (HasFatalFailure()) return;
  gpu_test::Comparison all = gpu_test::Merged(mixed);
  all.Merge(gpu_test::Merged(text));
  gpu_test::ExpectClose(mc.name, seed, all);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelOnGpu,
                         ::testing::Values(ModelCase{"tiny_qwen3", "bf16", "tiny_qwen3"},
                                           ModelCase{"smollm2", "bf16", "smollm2"},
                                           ModelCase{"tiny_qwen3", "int4", "tiny_qwen3_lm_int4"},
                                           ModelCase{"smollm2", "int4", "smollm2_lm_int4"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace dq
