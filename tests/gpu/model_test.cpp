// Whole-model check: the CUDA backend's logits against the CPU backend's on the same checkpoint
// (SmolLM2 Q4_1 GGUF, the tiny random Qwen3), through prefill (one shot and chunked) and a few
// decode steps fed the same tokens. Top-1 must agree wherever the CPU's top two are not a near
// tie; the largest |Δlogit| is printed for the record.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq {
namespace {

struct Comparison {
  double max_abs_diff = 0;
  double max_abs_logit = 0;
  int rows = 0;
  int top1_agree = 0;
  int near_ties = 0;  // rows whose CPU top-2 margin is within the tolerance (not judged)
  int top1_disagree = 0;
};

int Argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

void Compare(const BatchLogits& cpu, const BatchLogits& gpu, double tie_margin, Comparison* c) {
  ASSERT_EQ(cpu.values.size(), gpu.values.size());
  const int v = cpu.vocab;
  for (size_t r = 0; r < cpu.values.size() / v; ++r) {
    const float* a = cpu.row(r);
    const float* b = gpu.row(r);
    for (int i = 0; i < v; ++i) {
      c->max_abs_diff = std::max(c->max_abs_diff, double(std::fabs(a[i] - b[i])));
      c->max_abs_logit = std::max(c->max_abs_logit, double(std::fabs(a[i])));
    }
    const int top = Argmax(a, v);
    float second = -INFINITY;
    for (int i = 0; i < v; ++i) {
      if (i != top) second = std::max(second, a[i]);
    }
    ++c->rows;
    if (a[top] - second < tie_margin) {
      ++c->near_ties;
    } else if (Argmax(b, v) == top) {
      ++c->top1_agree;
    } else {
      ++c->top1_disagree;
    }
  }
}

std::string TinyPath() {
  const char* env = std::getenv("DQ_TINY_QWEN3");
  return env ? env : std::string(DQ_BINARY_DIR) + "/tiny-qwen3";
}

class ModelOnGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelOnGpu, LogitsMatchTheCpuBackend) {
  DQ_REQUIRE_GPU();
  const char* smol = std::getenv("DQ_SMOLLM2");  // the GPU machine's copy (tests/gpu/run.sh)
  const std::string path =
      GetParam() != "smollm2" ? TinyPath()
      : smol != nullptr       ? std::string(smol)
                        : std::string(DQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
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

  std::vector<int32_t> prompt = m.tokenizer.Encode(
      "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
      false);
  const uint64_t seed = gpu_test::FreshSeed();
  std::mt19937 rng(seed);
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>(rng() % m.config.vocab_size));
  const int n = static_cast<int>(prompt.size());
  Comparison cmp;
  const double tie = 0.02 * 10;  // judged only where the CPU's top-2 gap exceeds 0.2
  // One-shot prefill with every position's logits, then chunked on the GPU, then decode steps.
  KvSequence sc, sg, sg2;
  (*cpu)->kv_pool().extend(sc, n + 16);
  (*gpu)->kv_pool().extend(sg, n + 16);
  (*gpu)->kv_pool().extend(sg2, n + 16);
  BatchLogits lc, lg, lg2;
  ASSERT_TRUE((*cpu)->Forward(Batch{Phase::kPrefill, {{&sc, prompt, true}}}, &lc).ok());
  ASSERT_TRUE((*gpu)->Forward(Batch{Phase::kPrefill, {{&sg, prompt, true}}}, &lg).ok());
  Compare(lc, lg, tie, &cmp);
  const std::span<const int32_t> all(prompt);
  ASSERT_TRUE(
      (*gpu)->Forward(Batch{Phase::kPrefill, {{&sg2, all.subspan(0, n / 3), false}}}, &lg2).ok());
  ASSERT_TRUE(
      (*gpu)->Forward(Batch{Phase::kPrefill, {{&sg2, all.subspan(n / 3), false}}}, &lg2).ok());
  {
    BatchLogits last;
    last.vocab = lc.vocab;
    last.values.assign(lc.row(n - 1), lc.row(n - 1) + lc.vocab);
    Compare(last, lg2, tie, &cmp);
  }
  int32_t next = Argmax(lc.row(n - 1), lc.vocab);
  for (int step = 0; step < 8; ++step) {
    BatchLogits dc, dg;
    ASSERT_TRUE(
        (*cpu)->Forward(Batch{Phase::kDecode, {{&sc, std::span(&next, 1), false}}}, &dc).ok());
    ASSERT_TRUE(
        (*gpu)->Forward(Batch{Phase::kDecode, {{&sg, std::span(&next, 1), false}}}, &dg).ok());
    Compare(dc, dg, tie, &cmp);
    next = Argmax(dc.row(0), dc.vocab);
  }
  std::printf(
      "[%s] seed %llu: %d rows, top-1 agrees on %d, disagrees on %d, %d near ties; "
      "max |dlogit| %.4f (max |logit| %.2f)\n",
      GetParam().c_str(), static_cast<unsigned long long>(seed), cmp.rows, cmp.top1_agree,
      cmp.top1_disagree, cmp.near_ties, cmp.max_abs_diff, cmp.max_abs_logit);
  EXPECT_EQ(cmp.top1_disagree, 0);
  EXPECT_LT(cmp.max_abs_diff, 0.05 * cmp.max_abs_logit + 0.5);
  (*cpu)->kv_pool().release(sc);
  (*gpu)->kv_pool().release(sg);
  (*gpu)->kv_pool().release(sg2);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelOnGpu, ::testing::Values("tiny_qwen3", "smollm2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dq
