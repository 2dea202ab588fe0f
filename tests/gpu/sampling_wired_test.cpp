// Device sampling wired into the CUDA model: generation through ModelRunner::ForwardAndSample
// (ForwardSample: the logits stay on the device, only ids come back) against Forward + the CPU
// Sampler on the same runner, greedy and seeded (temperature 0.8, top-p 0.9), one-shot prefill
// of two prompts and batched decode, with and without CUDA graphs. Each path generates freely;
// a step is judged where the CPU's choice is clear (not a near tie in the logits, the draw or
// the nucleus cut). A sequence whose paths part at a near tie is not judged after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/sampler/sampler.h"
#include "tests/gpu/gpu_test_util.h"

namespace dq {
namespace {

// Both paths run the same kernels on the same inputs (the model's kernels have no float
// atomics), so the logits agree; what differs is the draw's arithmetic: the device's expf
// (<= 2 ulp) and parallel sums put any prefix of the probability mass within ~4e-7 of the CPU's,
// relatively. Margins below these are near ties.
constexpr float kGreedyTie = 1e-4f;  // top-2 logit gap
constexpr double kDrawTie = 1e-6;    // to an interval edge, the nucleus cut (/ total) or min-p

struct Reference {
  int32_t token = -1;
  bool clear = false;
};

Reference GreedyReference(std::span<const float> raw) {
  const auto top = std::max_element(raw.begin(), raw.end());
  float second = -INFINITY;
  for (auto it = raw.begin(); it != raw.end(); ++it) {
    if (it != top) second = std::max(second, *it);
  }
  return {static_cast<int32_t>(top - raw.begin()), *top - second > kGreedyTie};
}

// The CPU Sampler's rule by brute force (kept set by a full sort, draw in id order) with `u`,
// and whether the choice stands clear of the nucleus cut, the min-p bar and its interval's
// edges.
Reference SampledReference(std::span<const float> raw, const SamplingParams& p, double u) {
  std::vector<float> l(raw.begin(), raw.end());
  for (float& x : l) x *= 1.0f / p.temperature;
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, ids.size()) : ids.size();
  const float m = l[ids[0]];
  double total = 0.0;
  for (size_t j = 0; j < k; ++j) total += std::exp(l[ids[j]] - m);
  const double cut = static_cast<double>(p.top_p) * total;
  double before = 0.0, margin = INFINITY;
  std::vector<float> kept(l.size(), 0.0f);
  for (size_t j = 0; j < k; ++j) {
    if (p.top_p < 1.0f) margin = std::min(margin, std::fabs(before - cut) / total);
    if (p.top_p < 1.0f && before >= cut) break;
    const float v = std::exp(l[ids[j]] - m);  // p / p_max, what min-p compares
    before += v;
    if (p.min_p > 0.0f) margin = std::min(margin, std::fabs(double{v} - p.min_p));
    if (v >= p.min_p) kept[ids[j]] = v;
  }
  const double sum = std::accumulate(kept.begin(), kept.end(), 0.0);
  const double target = u * sum;
  double acc = 0.0;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (kept[i] <= 0.0f) continue;
    if (acc + kept[i] > target) {
      const double edge = std::min(target - acc, acc + kept[i] - target) / sum;
      return {static_cast<int32_t>(i), margin > kDrawTie && edge > kDrawTie};
    }
    acc += kept[i];
  }
  return {};
}

std::string ModelPath(const std::string& name) {
  const char* env = std::getenv(name == "smollm2" ? "DQ_SMOLLM2" : "DQ_TINY_QWEN3");
  return env != nullptr ? env : "";
}

// One generation path: two sequences, their samplers and the tokens they produced.
struct Path {
  std::vector<KvSequence> kv = std::vector<KvSequence>(2);
  std::vector<Sampler> samplers;
  std::vector<int32_t> next = std::vector<int32_t>(2);
  std::vector<std::vector<int32_t>> tokens = std::vector<std::vector<int32_t>>(2);
};

class SamplingWired : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    DQ_REQUIRE_GPU();
    const std::string path = ModelPath(std::get<0>(GetParam()));
    if (path.empty()) GTEST_SKIP() << "DQ_TINY_QWEN3 / DQ_SMOLLM2 not set (tests/gpu/run.sh)";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
    auto model = LoadModel(path);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    ModelRunnerOptions ro;
    ro.kv_capacity = 1024;
    cuda::CudaBackendOptions co;
    co.use_graphs = std::get<1>(GetParam());
    ro.backend = cuda::CudaBackendFactory(co);
    auto runner = ModelRunner::Create(*model_->checkpoint, model_->config, ro);
    ASSERT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(*runner);
    ASSERT_TRUE(runner_->SupportsDeviceSampling(Phase::kPrefill));
    ASSERT_TRUE(runner_->SupportsDeviceSampling(Phase::kDecode));
  }

  // One step of both sequences on one path: on the host (Forward, the CPU Sampler, and the
  // judgement of each choice into `refs`) or on the device (ForwardAndSample).
  void Step(Path& path, const Batch& batch, bool host, std::vector<Reference>* refs) {
    std::vector<Sampler*> samplers = {&path.samplers[0], &path.samplers[1]};
    std::vector<int32_t> out(2);
    if (!host) {
      ASSERT_TRUE(runner_->ForwardAndSample(batch, samplers, out).ok());
    } else {
      BatchLogits logits;
      ASSERT_TRUE(runner_->Forward(batch, &logits).ok());
      for (size_t i = 0; i < 2; ++i) {
        const std::span<const float> raw(logits.last(i, batch), logits.vocab);
        const SamplingParams& p = path.samplers[i].params();
        (*refs)[i] = p.temperature < kGreedyTemperature
                         ? GreedyReference(raw)
                         : SampledReference(raw, p, judges_[i].DrawUniform());
        std::vector<float> row(raw.begin(), raw.end());
        out[i] = path.samplers[i].Sample(row);
      }
    }
    for (size_t i = 0; i < 2; ++i) {
      path.next[i] = out[i];
      path.tokens[i].push_back(out[i]);
    }
  }

  void Compare(const SamplingParams& params, int steps) {
    const std::vector<int32_t> prompts[2] = {
        model_->tokenizer.Encode("The capital of France is Paris. The capital of Italy is", false),
        model_->tokenizer.Encode("Once upon a time, in a small village by the sea,", false)};
    Path host, device;
    for (int i = 0; i < 2; ++i) {
      SamplingParams p = params;
      if (p.seed) *p.seed += i;
      host.samplers.emplace_back(p);
      device.samplers.emplace_back(p);
      judges_.emplace_back(p);
      for (Path* path : {&host, &device}) {
        runner_->kv_pool().extend(path->kv[i], static_cast<int>(prompts[i].size()) + steps + 1);
      }
    }
    int judged = 0, near_ties = 0;
    bool parted[2] = {false, false};
    for (int step = 0; step <= steps; ++step) {  // step 0: the prefill of both prompts
      std::vector<Reference> refs(2);
      for (Path* path : {&host, &device}) {
        Batch batch{step == 0 ? Phase::kPrefill : Phase::kDecode, {}};
        for (int i = 0; i < 2; ++i) {
          batch.items.push_back({&path->kv[i], step == 0
                                                   ? std::span<const int32_t>(prompts[i])
                                                   : std::span<const int32_t>(&path->next[i], 1)});
        }
        Step(*path, batch, path == &host, &refs);
        if (HasFatalFailure()) return;
      }
      for (int i = 0; i < 2; ++i) {
        if (parted[i]) continue;
        const int32_t h = host.tokens[i].back(), d = device.tokens[i].back();
        if (!refs[i].clear) {
          ++near_ties;
          parted[i] = h != d;  // the contexts differ from here on
          continue;
        }
        ++judged;
        EXPECT_EQ(refs[i].token, h) << "the CPU Sampler left its rule, sequence " << i;
        EXPECT_EQ(d, h) << "sequence " << i << " step " << step;
        parted[i] = h != d;
      }
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(device.samplers[i].draws(), host.samplers[i].draws());
      if (!parted[i]) {
        EXPECT_EQ(device.tokens[i], host.tokens[i]) << "sequence " << i;
      }
      runner_->kv_pool().release(host.kv[i]);
      runner_->kv_pool().release(device.kv[i]);
    }
    std::printf("[%s graphs=%d T=%.1f top_p=%.2f] %d choices judged equal, %d near ties\n",
                std::get<0>(GetParam()).c_str(), std::get<1>(GetParam()), params.temperature,
                params.top_p, judged, near_ties);
    EXPECT_GT(judged, steps);  // most steps of the two sequences were clear enough to judge
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  std::vector<Sampler> judges_;  // draw in lockstep with the host path's samplers
};

TEST_P(SamplingWired, GreedyMatchesForwardPlusCpuSampler) {
  SamplingParams p;
  p.temperature = 0.0f;
  Compare(p, 16);
}

TEST_P(SamplingWired, SeededTopPMatchesForwardPlusCpuSampler) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = gpu_test::FreshSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(*p.seed));
  Compare(p, 16);
}

TEST_P(SamplingWired, SeededTopKMinPMatchesForwardPlusCpuSampler) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 40;
  p.min_p = 0.02f;
  p.seed = gpu_test::FreshSeed();
  std::printf("seed %llu\n", static_cast<unsigned long long>(*p.seed));
  Compare(p, 16);
}

INSTANTIATE_TEST_SUITE_P(Models, SamplingWired,
                         ::testing::Combine(::testing::Values("tiny_qwen3", "smollm2"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_graphs" : "_no_graphs");
                         });

}  // namespace
}  // namespace dq
