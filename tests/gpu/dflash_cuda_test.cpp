// DFlash on a CUDA target (issue 18): the CUDA backend's taps (ForwardHooks::tap_layers) against
// the CPU backend's layer outputs on the same checkpoint; a graphed decode step's taps and logits
// against an uncaptured step's, bit for bit; the drafter's block logits from the CUDA target's
// taps against those from the CPU target's (top-1 wherever the CPU-fed drafter's top two are
// not a near tie); and speculative decoding with DFlash on the CUDA target, batch-invariant,
// against plain CUDA decoding, token for token at batch 1 and 3.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/spec/dflash_checkpoint_maker.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/hidden_capture.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"
#include "tests/unit/engine/spec/spec_test_util.h"

namespace dq {
namespace {

std::unique_ptr<ModelRunner> MakeRunner(const Model& m, const cuda::CudaBackendOptions* co) {
  ModelRunnerOptions ro;
  ro.kv_capacity = 2048;
  ro.threads = 4;
  if (co != nullptr) ro.backend = cuda::CudaBackendFactory(*co);
  ro.cpu_bf16_activations = co == nullptr;  // the CPU rounds activations as CUDA stores them
  auto r = ModelRunner::Create(*m.checkpoint, m.config, ro);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

// Every layer's output for `tokens` (one prefill pass), [layer][tokens * hidden].
std::vector<std::vector<float>> AllLayers(ModelRunner& r, std::span<const int32_t> tokens,
                                          std::span<const int> layers, int num_layers) {
  std::vector<std::vector<float>> out(num_layers);
  ForwardHooks hooks;
  hooks.tap_layers.assign(layers.begin(), layers.end());
  hooks.on_layer_output = [&](int l, std::span<const float> h) {
    out[l].assign(h.begin(), h.end());
  };
  KvSequence seq;
  r.kv_pool().extend(seq, static_cast<int>(tokens.size()));
  BatchLogits logits;
  EXPECT_TRUE(r.Forward(Batch{Phase::kPrefill, {{&seq, tokens, false}}}, &logits, hooks).ok());
  r.kv_pool().release(seq);
  return out;
}

double RelRms(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d += (double{got[i]} - ref[i]) * (double{got[i]} - ref[i]);
    n += double{ref[i]} * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

class DFlashOnCuda : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    DQ_REQUIRE_GPU();
    const std::string path = gpu_test::TestModelPath(GetParam());
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
    auto m = LoadModel(path);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  std::unique_ptr<Model> model_;
};

TEST_P(DFlashOnCuda, TapsMatchTheCpuBackendsLayerOutputs) {
  const ModelConfig& c = model_->config;
  auto cpu = MakeRunner(*model_, nullptr);
  cuda::CudaBackendOptions co;
  auto gpu = MakeRunner(*model_, &co);
  ASSERT_TRUE(cpu && gpu);
  const std::vector<int32_t> prompt = gpu_test::MixedPrompt(*model_, gpu_test::FreshSeed(), 24);
  const std::vector<int> layers = {0, c.num_layers / 2, c.num_layers - 1};
  const auto want = AllLayers(*cpu, prompt, layers, c.num_layers);
  const auto got = AllLayers(*gpu, prompt, layers, c.num_layers);
  for (int l = 0; l < c.num_layers; ++l) {
    const bool tapped = std::find(layers.begin(), layers.end(), l) != layers.end();
    ASSERT_EQ(got[l].size(), tapped ? prompt.size() * c.hidden_size : 0u) << "layer " << l;
    if (!tapped) continue;
    const double own = RelRms(got[l], want[l]);
    std::printf("[%s taps] layer %d: rms |gpu - cpu| / rms |cpu| = %.4f\n", GetParam().c_str(), l,
                own);
    EXPECT_LT(own, 0.1) << "layer " << l;
    // The tap is this layer's output, not a neighbour's.
    for (int other : layers) {
      if (other != l) EXPECT_GT(RelRms(got[l], want[other]), 3 * own) << l << " vs " << other;
    }
  }
}

TEST_P(DFlashOnCuda, GraphedDecodeTapsEqualUncapturedBitwise) {
  const ModelConfig& c = model_->config;
  cuda::CudaBackendOptions graphs, eager;
  eager.use_graphs = false;
  auto g = MakeRunner(*model_, &graphs);
  auto e = MakeRunner(*model_, &eager);
  ASSERT_TRUE(g && e);
  const std::vector<int32_t> prompt = gpu_test::MixedPrompt(*model_, 5, 8);
  const int steps = 4;
  std::vector<int> taps = {0, c.num_layers - 1};
  std::vector<float> rows[2];
  std::vector<float> logits[2];
  ModelRunner* runners[2] = {g.get(), e.get()};
  for (int r = 0; r < 2; ++r) {
    KvSequence seq;
    runners[r]->kv_pool().extend(seq, static_cast<int>(prompt.size()) + steps);
    BatchLogits out;
    ASSERT_TRUE(runners[r]->Forward(Batch{Phase::kPrefill, {{&seq, prompt, false}}}, &out).ok());
    ForwardHooks hooks;
    hooks.tap_layers = taps;
    hooks.on_layer_output = [&](int, std::span<const float> h) {
      rows[r].insert(rows[r].end(), h.begin(), h.end());
    };
    int32_t next = gpu_test::Argmax(out.row(0), out.vocab);
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE(
          runners[r]
              ->Forward(Batch{Phase::kDecode, {{&seq, std::span(&next, 1), false}}}, &out, hooks)
              .ok());
      logits[r].insert(logits[r].end(), out.values.begin(), out.values.end());
      next = gpu_test::Argmax(out.row(0), out.vocab);
    }
    runners[r]->kv_pool().release(seq);
  }
  EXPECT_EQ(rows[0].size(), size_t(steps) * taps.size() * c.hidden_size);
  const auto& graphed =
      dynamic_cast<const cuda::CudaDecoderModel&>(g->forward_model(Phase::kDecode));
  EXPECT_FALSE(graphed.captured_decode_batches().empty()) << "the graph path was not taken";
  ASSERT_EQ(rows[0].size(), rows[1].size());
  EXPECT_EQ(gpu_test::BitwiseDiff(rows[0].data(), rows[1].data(), rows[0].size()).values, 0);
  ASSERT_EQ(logits[0].size(), logits[1].size());
  EXPECT_EQ(gpu_test::BitwiseDiff(logits[0].data(), logits[1].data(), logits[0].size()).values, 0);
}

class DFlashDrafterOnCuda : public DFlashOnCuda {
 protected:
  std::unique_ptr<DFlashDrafter> Drafter() {
    if (dir_.empty()) {
      dir_ = scratch_.path() + "/dflash";
      RandomDFlashOptions o;
      o.intermediate = 256;
      EXPECT_TRUE(WriteRandomDFlashCheckpoint(model_->config, o, dir_).ok());
    }
    DFlashDrafterOptions d;
    d.threads = 4;
    d.kv_capacity = 2048;
    checkpoints_.emplace_back();
    auto r =
        DFlashDrafter::Load(dir_, *model_->checkpoint, model_->config, d, &checkpoints_.back());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  gpu_test::ScratchDir scratch_;
  std::string dir_;
  std::vector<std::unique_ptr<Checkpoint>> checkpoints_;
};

TEST_P(DFlashDrafterOnCuda, BlockLogitsFromCudaTapsMatchThoseFromCpuTaps) {
  const ModelConfig& c = model_->config;
  auto cpu = MakeRunner(*model_, nullptr);
  cuda::CudaBackendOptions co;
  auto gpu = MakeRunner(*model_, &co);
  auto from_cpu = Drafter();
  auto from_gpu = Drafter();
  ASSERT_TRUE(cpu && gpu && from_cpu && from_gpu);
  const uint64_t seed = gpu_test::FreshSeed();
  const std::vector<int32_t> ids = gpu_test::MixedPrompt(*model_, seed, 16);
  const int n = static_cast<int>(ids.size()) - 1;  // context; ids[n] anchors the block
  gpu_test::Comparison cmp;
  DFlashDrafter* drafters[2] = {from_cpu.get(), from_gpu.get()};
  ModelRunner* targets[2] = {cpu.get(), gpu.get()};
  std::vector<float> block[2];
  for (int i = 0; i < 2; ++i) {
    HiddenCapture capture(drafters[i]->target_layers(), c.num_layers, c.hidden_size);
    KvSequence seq;
    targets[i]->kv_pool().extend(seq, n);
    BatchLogits logits;
    ASSERT_TRUE(targets[i]
                    ->Forward(Batch{Phase::kPrefill, {{&seq, std::span(ids).first(n), false}}},
                              &logits, capture.Hooks())
                    .ok());
    targets[i]->kv_pool().release(seq);
    ASSERT_TRUE(drafters[i]->Begin(1, ids).ok());
    drafters[i]->ObserveTarget(1, 0, n, capture.Rows(0, n));
    auto b = drafters[i]->BlockLogits(1, ids[n], n);
    ASSERT_TRUE(b.ok()) << b.status();
    block[i] = std::move(*b);
    drafters[i]->End(1);
  }
  BatchLogits a, b;
  a.vocab = b.vocab = c.vocab_size;
  a.values = block[0];
  b.values = block[1];
  gpu_test::Compare(a, b, &cmp);
  gpu_test::ExpectClose(GetParam() + " dflash block", seed, cmp);
}

TEST_P(DFlashDrafterOnCuda, SpeculativeDecodingEqualsPlainDecoding) {
  cuda::CudaBackendOptions co;
  co.batch_invariant = true;  // verification rows computed as the plain steps compute them
  auto gpu = MakeRunner(*model_, &co);
  auto drafter = Drafter();
  ASSERT_TRUE(gpu && drafter);
  const Model& m = *model_;
  for (size_t batch : {1u, 3u}) {
    std::vector<GenerationRequest> reqs = {spec_test::Request(m, "The capital of France is", 20),
                                           spec_test::Request(m, "1 2 3 4 5 6", 16),
                                           spec_test::Request(m, "Once upon a time", 18)};
    reqs.resize(batch);
    const auto plain = spec_test::Run(*gpu, m, reqs);
    const auto spec = spec_test::Run(*gpu, m, reqs, drafter.get(), 4);
    ASSERT_EQ(spec.size(), reqs.size());
    ASSERT_EQ(plain.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << " request " << i);
      EXPECT_EQ(spec[i].tokens, plain[i].tokens);
      EXPECT_GT(spec[i].spec.drafted, 0);
      std::printf(
          "[%s dflash on cuda] batch %zu request %zu: %lld steps, %lld drafted, %lld accepted\n",
          GetParam().c_str(), batch, i, (long long)spec[i].spec.steps,
          (long long)spec[i].spec.drafted, (long long)spec[i].spec.accepted);
    }
  }
  EXPECT_EQ(drafter->kv_pool().num_free_blocks(), drafter->kv_pool().options().num_blocks);
}

INSTANTIATE_TEST_SUITE_P(Models, DFlashOnCuda, ::testing::Values("tiny_qwen3", "smollm2"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Models, DFlashDrafterOnCuda, ::testing::Values("tiny_qwen3", "smollm2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dq
