// ModelRunner::ForwardAndSample: which path it takes (device sampling or Forward + the CPU
// Sampler), that the device path gets each sampler's next uniform, and that both paths give the
// same tokens. The device is a fake backend that samples on the host with the uniform it is
// given, exactly as the CPU Sampler's unsorted path does; the real kernels are checked against
// the CPU in tests/gpu/sampling_wired_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/generate/generator.h"
#include "engine/model/model_runner.h"
#include "engine/sampler/sampler.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

// Logits that depend only on the last token and its position: a peak that moves with both and
// enough spread that sampling at temperature 0.8 varies.
void FillRow(int32_t last, int pos, int vocab, float* row) {
  const int center = static_cast<int>((last * 31LL + pos * 17LL + 5) % vocab);
  for (int v = 0; v < vocab; ++v) {
    const int d = std::abs(v - center);
    row[v] = -0.15f * static_cast<float>(std::min(d, vocab - d));
  }
}

// The CPU Sampler's choice with uniform `u` when top-k, top-p and min-p are off.
int32_t PickLikeTheSampler(std::vector<float> l, const DeviceSampling& d) {
  if (d.temperature < kGreedyTemperature) {
    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  }
  if (d.temperature != 1.0f) {
    const float inv_t = 1.0f / d.temperature;
    for (float& x : l) x *= inv_t;
  }
  const float m = *std::max_element(l.begin(), l.end());
  double sum = 0.0;
  for (float& x : l) sum += (x = std::exp(x - m));
  double acc = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    acc += l[i];
    if (acc > d.uniform * sum) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(l.size() - 1);
}

class FakeBackend : public ForwardModel {
 public:
  FakeBackend(const ModelConfig& c, bool device) : config_(c), device_(device) {}
  const ModelConfig& config() const override { return config_; }
  std::string_view backend() const override { return "fake"; }
  bool SupportsDeviceSampling() const override { return device_; }

  absl::Status Forward(const Batch& batch, KvBlockPool&, ThreadPool&, BatchLogits* logits,
                       const ForwardHooks&) const override {
    ++forward_calls;
    Run(batch, logits);
    return absl::OkStatus();
  }

  absl::Status ForwardSample(const Batch& batch, KvBlockPool&, ThreadPool&,
                             std::span<const DeviceSampling> per_item,
                             std::span<int32_t> out_tokens, const ForwardHooks&) const override {
    ++sample_calls;
    seen.assign(per_item.begin(), per_item.end());
    BatchLogits logits;
    Run(batch, &logits);
    for (size_t i = 0; i < per_item.size(); ++i) {
      std::vector<float> row(logits.row(i), logits.row(i) + logits.vocab);
      out_tokens[i] = PickLikeTheSampler(std::move(row), per_item[i]);
    }
    return absl::OkStatus();
  }

  mutable int forward_calls = 0;
  mutable int sample_calls = 0;
  mutable std::vector<DeviceSampling> seen;  // the last ForwardSample's parameters

 private:
  // One logits row per item (the fake has no all_logits); advances the KV as Forward must.
  void Run(const Batch& batch, BatchLogits* logits) const {
    const int v = config_.vocab_size;
    logits->vocab = v;
    logits->values.assign(batch.items.size() * static_cast<size_t>(v), 0.0f);
    logits->item_first_row.clear();
    for (size_t i = 0; i < batch.items.size(); ++i) {
      const BatchItem& it = batch.items[i];
      logits->item_first_row.push_back(static_cast<int64_t>(i));
      const int pos = it.kv->num_tokens + static_cast<int>(it.tokens.size()) - 1;
      FillRow(it.tokens.back(), pos, v, logits->values.data() + i * v);
      it.kv->num_tokens += static_cast<int>(it.tokens.size());
    }
  }

  ModelConfig config_;
  bool device_;
};

class ForwardAndSampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::LoadTinyQwen3();
    ASSERT_NE(model_, nullptr);
  }

  // A runner over the fake backend (both phases one model), or over the CPU with `cpu`.
  std::unique_ptr<ModelRunner> Runner(bool device, bool cpu = false) {
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = 1024;
    if (!cpu) {
      o.backend = [this, device](const DecoderModel&, const DecoderModel& decode,
                                 const KvCacheOptions&) -> absl::StatusOr<BackendModels> {
        fake_ = std::make_shared<FakeBackend>(decode.config(), device);
        return BackendModels{fake_, fake_};
      };
    }
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }

  std::vector<GenerationResult> Generate(ModelRunner& runner, std::vector<GenerationRequest> reqs) {
    Generator g(runner, model_->tokenizer, model_->config.eos_token_ids);
    auto r = g.Generate(reqs);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<GenerationResult>{};
  }

  GenerationRequest Request(float temperature, uint64_t seed) {
    GenerationRequest r;
    r.prompt = model_->tokenizer.Encode("Once upon a time");
    r.params.max_tokens = 16;
    r.params.temperature = temperature;
    r.params.seed = seed;
    r.params.ignore_eos = true;
    return r;
  }

  std::unique_ptr<Model> model_;
  std::shared_ptr<FakeBackend> fake_;
};

TEST_F(ForwardAndSampleTest, DevicePathGivesTheHostPathsTokens) {
  const std::vector<GenerationRequest> reqs = {Request(0.0f, 1), Request(0.8f, 2),
                                               Request(0.8f, 3)};
  auto host = Runner(false);
  ASSERT_NE(host, nullptr);
  const auto expected = Generate(*host, reqs);
  EXPECT_EQ(fake_->sample_calls, 0);
  auto device = Runner(true);
  ASSERT_NE(device, nullptr);
  const auto got = Generate(*device, reqs);
  EXPECT_GT(fake_->sample_calls, 0);
  EXPECT_EQ(fake_->forward_calls, 0);  // prefill and decode both sampled on the "device"
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].tokens.size(), 16u);
  }
  EXPECT_NE(expected[1].tokens, expected[2].tokens);  // the seeds matter: sampling is exercised
}

TEST_F(ForwardAndSampleTest, DeviceGetsEachSamplersNextUniformAndParameters) {
  auto runner = Runner(true);
  ASSERT_NE(runner, nullptr);
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = -1;  // off, as the Sampler normalises it: 0
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.seed = 11;
  Sampler a(p), twin(p);
  p.seed = 12;
  Sampler b(p), twin_b(p);
  KvSequence ka, kb;
  runner->kv_pool().extend(ka, 4);
  runner->kv_pool().extend(kb, 4);
  const int32_t in[2] = {5, 6};
  const Batch batch{Phase::kDecode, {{&ka, std::span(&in[0], 1)}, {&kb, std::span(&in[1], 1)}}};
  Sampler* samplers[2] = {&a, &b};
  int32_t out[2] = {-1, -1};
  ASSERT_TRUE(runner->ForwardAndSample(batch, samplers, out).ok());
  EXPECT_EQ(fake_->sample_calls, 1);
  ASSERT_EQ(fake_->seen.size(), 2u);
  EXPECT_EQ(fake_->seen[0].uniform, twin.DrawUniform());
  EXPECT_EQ(fake_->seen[1].uniform, twin_b.DrawUniform());
  EXPECT_EQ(fake_->seen[0].temperature, 0.7f);
  EXPECT_EQ(fake_->seen[0].top_k, 0);
  EXPECT_EQ(fake_->seen[0].top_p, 0.9f);
  EXPECT_EQ(fake_->seen[0].min_p, 0.05f);
  EXPECT_EQ(a.draws(), 1u);
  EXPECT_EQ(b.draws(), 1u);
  EXPECT_EQ(ka.num_tokens, 1);  // the KV advanced as Forward advances it
  runner->kv_pool().release(ka);
  runner->kv_pool().release(kb);
}

TEST_F(ForwardAndSampleTest, FallsBackToTheHostForLogitsPenaltiesAndAllLogits) {
  auto runner = Runner(true);
  ASSERT_NE(runner, nullptr);
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler plain(p);
  p.repetition_penalty = 1.2f;
  Sampler penalised(p);
  KvSequence kv;
  runner->kv_pool().extend(kv, 8);
  const int32_t tok = 7;
  int32_t out = -1;
  Sampler* s = &plain;
  BatchLogits logits;
  const Batch batch{Phase::kDecode, {{&kv, std::span(&tok, 1)}}};
  ASSERT_TRUE(runner->ForwardAndSample(batch, std::span(&s, 1), std::span(&out, 1), &logits).ok());
  EXPECT_EQ(fake_->forward_calls, 1);  // logits wanted (logprobs): the host path
  EXPECT_EQ(logits.vocab, model_->config.vocab_size);
  EXPECT_EQ(out,
            static_cast<int32_t>(std::max_element(logits.row(0), logits.row(0) + logits.vocab) -
                                 logits.row(0)));  // the raw row, not the scratch copy
  s = &penalised;
  ASSERT_TRUE(runner->ForwardAndSample(batch, std::span(&s, 1), std::span(&out, 1)).ok());
  EXPECT_EQ(fake_->forward_calls, 2);  // penalties need the host
  const Batch all{Phase::kPrefill, {{&kv, std::span(&tok, 1), /*all_logits=*/true}}};
  s = &plain;
  ASSERT_TRUE(runner->ForwardAndSample(all, std::span(&s, 1), std::span(&out, 1)).ok());
  EXPECT_EQ(fake_->forward_calls, 3);
  EXPECT_EQ(fake_->sample_calls, 0);
  EXPECT_EQ(plain.draws(), 2u);  // one draw per step on either path
  EXPECT_EQ(penalised.draws(), 1u);
  runner->kv_pool().release(kv);
}

TEST_F(ForwardAndSampleTest, RejectsOneSamplerOrTokenSlotTooFew) {
  auto runner = Runner(true);
  ASSERT_NE(runner, nullptr);
  KvSequence kv;
  runner->kv_pool().extend(kv, 4);
  const int32_t tok = 3;
  const Batch batch{Phase::kDecode, {{&kv, std::span(&tok, 1)}}};
  int32_t out = 0;
  const absl::Status st = runner->ForwardAndSample(batch, {}, std::span(&out, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(kv.num_tokens, 0);  // nothing ran
  runner->kv_pool().release(kv);
}

TEST_F(ForwardAndSampleTest, CpuBackendSamplesOnTheHostAsForwardPlusSample) {
  auto runner = Runner(false, /*cpu=*/true);
  ASSERT_NE(runner, nullptr);
  EXPECT_FALSE(runner->SupportsDeviceSampling(Phase::kDecode));
  const std::vector<int32_t> prompt = model_->tokenizer.Encode("The sky is");
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 5;
  Sampler sampler(p), reference(p);
  KvSequence a, b;
  runner->kv_pool().extend(a, static_cast<int>(prompt.size()));
  runner->kv_pool().extend(b, static_cast<int>(prompt.size()));
  Sampler* s = &sampler;
  int32_t token = -1;
  ASSERT_TRUE(runner
                  ->ForwardAndSample({Phase::kPrefill, {{&a, prompt}}}, std::span(&s, 1),
                                     std::span(&token, 1))
                  .ok());
  BatchLogits logits;
  ASSERT_TRUE(runner->Forward({Phase::kPrefill, {{&b, prompt}}}, &logits).ok());
  std::vector<float> row(logits.row(0), logits.row(0) + logits.vocab);
  EXPECT_EQ(token, reference.Sample(row));
  const DeviceSampling d;
  const absl::Status st = runner->ForwardSample({Phase::kDecode, {{&a, std::span(&token, 1)}}},
                                                std::span(&d, 1), std::span(&token, 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  runner->kv_pool().release(a);
  runner->kv_pool().release(b);
}

}  // namespace
}  // namespace dq
