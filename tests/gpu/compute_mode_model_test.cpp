// Whole-model check of the prefill worker's compute modes: the tiny random Qwen3 and SmolLM2
// (its Q4_1 GGUF dequantized), quantized here to fp8 (W8A8) and nvfp4 (W4A4, with dynamic and
// with calibrated static activation scales), run on the CUDA backend and on the CPU backend in
// the same compute mode (the CPU reference has the same numerics: fp8_codec.cpp,
// nvfp4_codec.cpp): prefill one shot and chunked, then decode steps, top-1 identical where the
// CPU's top two are not a near tie and the largest |Δlogit| printed (model_compare.h:
// ExpectCloseQuantized says how the activations' rounding boundaries widen the margins). Then a
// runner with different weights per phase, as a disaggregated deployment on one GPU has: fp8 W8A8
// prefill and int4 weight-only decode, each phase's logits against the CPU's. Each case also runs
// the CPU's last layer on the GPU's input to it (model_compare.h, RunLastLayerOnGpuInput), on the
// mixed prompt and on plain text, whose rows are held to a judged share (half; a quarter in FP8,
// model_compare.h): the whole-model margins above, widened by every layer's activation rounding,
// judge few. The CPU rounds as the GPU does (ModelRunnerOptions::cpu_bf16_activations).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/cuda/cuda_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/model_compare.h"

namespace dq {
namespace {

using gpu_test::PhaseComparison;

struct ModeCase {
  std::string model;  // "tiny_qwen3" or "smollm2"
  std::string format;
  ComputeMode mode;
  bool calibrate;  // nvfp4: static activation global scales
  std::string name;
};

// The source model, or a skip when it is not on this machine.
std::unique_ptr<Model> LoadSource(const std::string& name) {
  const std::string path = gpu_test::TestModelPath(name);
  if (!std::filesystem::exists(path)) return nullptr;
  auto model = LoadModel(path);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// CPU and CUDA runners over the same per-phase weights. The CPU rounds its activations where
// the GPU stores bf16 ones (ModelRunnerOptions::cpu_bf16_activations), so that both quantize the
// same activation values to the same codes.
struct RunnerPair {
  std::unique_ptr<ModelRunner> cpu, gpu;
};
void MakeRunners(const PhaseWeights& prefill, const PhaseWeights& decode, RunnerPair* out) {
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  ro.cpu_bf16_activations = true;
  auto cpu = ModelRunner::Create(prefill, decode, ro);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ro.cpu_bf16_activations = false;
  ro.backend = cuda::CudaBackendFactory();
  auto gpu = ModelRunner::Create(prefill, decode, ro);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_EQ((*gpu)->backend(), "cuda");
  out->cpu = std::move(*cpu);
  out->gpu = std::move(*gpu);
}

// Whether every layer linear of `phase`'s CUDA model quantizes its activations (or none does):
// the compute mode reached the device upload. The logits cannot show it (model_compare.h).
void ExpectActivationsQuantized(const ModelRunner& gpu, Phase phase, bool quantized) {
  const cuda::CudaModelStats& s =
      dynamic_cast<const cuda::CudaDecoderModel&>(gpu.forward_model(phase)).stats();
  EXPECT_GT(s.layer_linears, 0);
  EXPECT_EQ(s.act_quantized_linears, quantized ? s.layer_linears : 0)
      << (phase == Phase::kPrefill ? "prefill" : "decode") << " model: activations quantized in "
      << s.act_quantized_linears << " of " << s.layer_linears << " layer linears";
}

// The CPU backend on the same weights, every phase in weight-only compute.
std::unique_ptr<ModelRunner> WeightOnlyCpuRunner(PhaseWeights prefill, PhaseWeights decode) {
  prefill.mode = decode.mode = ComputeMode::kWeightOnly;
  ModelRunnerOptions ro;
  ro.kv_capacity = 1024;
  auto r = ModelRunner::Create(prefill, decode, ro);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

class ComputeModeOnGpu : public ::testing::TestWithParam<ModeCase> {};

TEST_P(ComputeModeOnGpu, LogitsMatchTheCpuBackendInTheSameMode) {
  DQ_REQUIRE_GPU();
  const ModeCase& c = GetParam();
  std::unique_ptr<Model> source = LoadSource(c.model);
  if (source == nullptr) GTEST_SKIP() << gpu_test::TestModelPath(c.model) << " not present";
  gpu_test::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto q = gpu_test::QuantizedCopy(*source, dir.path(), c.format, c.format, 0, c.calibrate);
  ASSERT_TRUE(q.ok()) << q.status();
  const Model& m = **q;
  const PhaseWeights w{m.checkpoint.get(), &m.config, c.mode};
  RunnerPair r;
  MakeRunners(w, w, &r);
  if (HasFatalFailure()) return;
  const uint64_t seed = gpu_test::FreshSeed();
  const std::vector<int32_t> prompt = gpu_test::MixedPrompt(m, seed);
  ExpectActivationsQuantized(*r.gpu, Phase::kPrefill, true);
  PhaseComparison cmp, cpu_effect, gpu_effect;
  gpu_test::RunBothAndCompare(*r.cpu, *r.gpu, prompt, 8, &cmp);
  if (HasFatalFailure()) return;
  // The yardstick: how far this mode's activation quantization moves each backend's logits.
  std::unique_ptr<ModelRunner> cpu_wo = WeightOnlyCpuRunner(w, w);
  ASSERT_NE(cpu_wo, nullptr);
  gpu_test::RunBothAndCompare(*cpu_wo, *r.cpu, prompt, 8, &cpu_effect);
  gpu_test::RunBothAndCompare(*cpu_wo, *r.gpu, prompt, 8, &gpu_effect);
  if (HasFatalFailure()) return;
  const gpu_test::ModeEffect effect{gpu_test::Merged(cpu_effect), gpu_test::Merged(gpu_effect)};
  // Whole-model rows are judged where the margin allows (model_compare.h: FP8's accumulation and
  // W4A4's rare one-code flips compound layer by layer); the last layer is held to a share.
  gpu_test::ExpectCloseQuantized(c.name, seed, gpu_test::Merged(cmp), &effect, 0.0);
  PhaseComparison last;
  gpu_test::RunLastLayerOnGpuInput(*r.cpu, *r.gpu, prompt, 8, &last);
  PhaseComparison text;
  gpu_test::RunLastLayerOnGpuInput(*r.cpu, *r.gpu, gpu_test::TextPrompt(m), 8, &text);
  if (HasFatalFailure()) return;
  const double share = c.mode == ComputeMode::kW8A8 ? 0.25 : 0.5;  // model_compare.h
  gpu_test::ExpectLastLayerClose(c.name, seed, gpu_test::Merged(last), share);
  gpu_test::ExpectLastLayerClose(c.name + "_text", seed, gpu_test::Merged(text), share);
}

std::vector<ModeCase> Cases() {
  std::vector<ModeCase> v;
  for (const char* model : {"tiny_qwen3", "smollm2"}) {
    const std::string m = model;
    v.push_back({m, "fp8", ComputeMode::kW8A8, false, m + "_fp8_w8a8"});
    v.push_back({m, "nvfp4", ComputeMode::kW4A4, false, m + "_nvfp4_w4a4_dynamic"});
    v.push_back({m, "nvfp4", ComputeMode::kW4A4, true, m + "_nvfp4_w4a4_static"});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Modes, ComputeModeOnGpu, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// fp8 W8A8 prefill weights and int4 (group 64) weight-only decode weights in one runner, both
// on one device sharing the KV cache: the prefill logits come from the fp8 model, the decode
// steps' from the int4 one reading the KV cache the fp8 prefill wrote.
class MixedPhasesOnGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedPhasesOnGpu, Fp8PrefillInt4DecodeMatchTheCpuBackend) {
  DQ_REQUIRE_GPU();
  std::unique_ptr<Model> source = LoadSource(GetParam());
  if (source == nullptr) GTEST_SKIP() << gpu_test::TestModelPath(GetParam()) << " not present";
  gpu_test::ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto fp8 = gpu_test::QuantizedCopy(*source, dir.path(), "fp8", "fp8");
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  auto int4 = gpu_test::QuantizedCopy(*source, dir.path(), "int4", "int4", 64);
  ASSERT_TRUE(int4.ok()) << int4.status();
  const PhaseWeights prefill{(*fp8)->checkpoint.get(), &(*fp8)->config, ComputeMode::kW8A8};
  const PhaseWeights decode{(*int4)->checkpoint.get(), &(*int4)->config, ComputeMode::kWeightOnly};
  RunnerPair r;
  MakeRunners(prefill, decode, &r);
  if (HasFatalFailure()) return;
  const uint64_t seed = gpu_test::FreshSeed();
  const std::vector<int32_t> prompt = gpu_test::MixedPrompt(**fp8, seed);
  ExpectActivationsQuantized(*r.gpu, Phase::kPrefill, true);
  ExpectActivationsQuantized(*r.gpu, Phase::kDecode, false);
  PhaseComparison cmp, cpu_effect, gpu_effect;
  gpu_test::RunBothAndCompare(*r.cpu, *r.gpu, prompt, 8, &cmp);
  if (HasFatalFailure()) return;
  std::unique_ptr<ModelRunner> cpu_wo = WeightOnlyCpuRunner(prefill, decode);
  ASSERT_NE(cpu_wo, nullptr);
  gpu_test::RunBothAndCompare(*cpu_wo, *r.cpu, prompt, 8, &cpu_effect);
  gpu_test::RunBothAndCompare(*cpu_wo, *r.gpu, prompt, 8, &gpu_effect);
  if (HasFatalFailure()) return;
  const gpu_test::ModeEffect effect{cpu_effect.prefill, gpu_effect.prefill};
  gpu_test::ExpectCloseQuantized(GetParam() + "_mixed_prefill_fp8_w8a8", seed, cmp.prefill, &effect,
                                 0.0);
  // The int4 decode steps compute in weight-only mode but read the KV cache the W8A8 prefill
  // wrote (which differs between the backends as the prefill's logits do): judged like a
  // quantized mode, without the yardstick (theirs mixes in the decode's own bf16 noise).
  gpu_test::ExpectCloseQuantized(GetParam() + "_mixed_decode_int4", seed, cmp.decode, nullptr, 0.0);
  PhaseComparison last;
  gpu_test::RunLastLayerOnGpuInput(*r.cpu, *r.gpu, prompt, 8, &last);
  PhaseComparison text;
  gpu_test::RunLastLayerOnGpuInput(*r.cpu, *r.gpu, gpu_test::TextPrompt(**fp8), 8, &text);
  if (HasFatalFailure()) return;
  gpu_test::ExpectLastLayerClose(GetParam() + "_mixed_prefill_fp8_w8a8", seed, last.prefill, 0.25);
  gpu_test::ExpectLastLayerClose(GetParam() + "_mixed_decode_int4", seed, last.decode);
  gpu_test::ExpectLastLayerClose(GetParam() + "_mixed_prefill_fp8_w8a8_text", seed, text.prefill,
                                 0.25);
  gpu_test::ExpectLastLayerClose(GetParam() + "_mixed_decode_int4_text", seed, text.decode);
}

INSTANTIATE_TEST_SUITE_P(Models, MixedPhasesOnGpu, ::testing::Values("tiny_qwen3", "smollm2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace dq
