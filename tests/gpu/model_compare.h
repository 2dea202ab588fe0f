// Whole-model comparisons for the GPU tests: the test models' paths, quantized copies of them in
// a temporary directory, and one prompt run through a CPU and a CUDA runner (one-shot prefill
// with every position's logits, chunked prefill, decode steps fed the same tokens) with the
// logits compared per phase: largest |Δlogit| and top-1 agreement where the CPU's top two are
// not a near tie.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/decoder_model.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_runner.h"
#include "engine/quant/checkpoint_quantizer.h"

namespace dq::gpu_test {

// Top-1 is judged only where the CPU's top-2 gap exceeds 8x the rms |Δlogit| of the comparison,
// and at least this.
inline constexpr double kTieMargin = 0.05;

struct Comparison {
  double max_abs_diff = 0;
  double max_abs_logit = 0;
  double sum_sq_diff = 0;
  int64_t values = 0;
  // Per row: the CPU's top-2 gap and whether the GPU's top-1 is the CPU's.
  std::vector<std::pair<float, bool>> rows;

  double rms_diff() const { return values > 0 ? std::sqrt(sum_sq_diff / values) : 0.0; }
  void Merge(const Comparison& o) {
    max_abs_diff = std::max(max_abs_diff, o.max_abs_diff);
    max_abs_logit = std::max(max_abs_logit, o.max_abs_logit);
    sum_sq_diff += o.sum_sq_diff;
    values += o.values;
    rows.insert(rows.end(), o.rows.begin(), o.rows.end());
  }
};

struct Top1 {
  int agree = 0, disagree = 0, near_ties = 0;  // near ties: gap within the margin, not judged
};
inline Top1 CountTop1(const Comparison& c, double tie_margin) {
  Top1 t;
  for (const auto& [gap, same] : c.rows) {
    if (gap < tie_margin) {
      ++t.near_ties;
    } else {
      ++(same ? t.agree : t.disagree);
    }
  }
  return t;
}

// Values of `a` and `b` (n each) that differ bitwise, and the largest difference among them.
struct Mismatch {
  int64_t values = 0;
  double max_abs = 0;
};
inline Mismatch BitwiseDiff(const float* a, const float* b, int64_t n) {
  Mismatch m;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0) {
      ++m.values;
      m.max_abs = std::max(m.max_abs, double(std::fabs(a[i] - b[i])));
    }
  }
  return m;
}

inline int Argmax(const float* x, int n) {
  return static_cast<int>(std::max_element(x, x + n) - x);
}

inline void Compare(const BatchLogits& cpu, const BatchLogits& gpu, Comparison* c) {
  ASSERT_EQ(cpu.values.size(), gpu.values.size());
  const int v = cpu.vocab;
  for (size_t r = 0; r < cpu.values.size() / v; ++r) {
    const float* a = cpu.row(r);
    const float* b = gpu.row(r);
    for (int i = 0; i < v; ++i) {
      const double d = std::fabs(double{a[i]} - b[i]);
      c->max_abs_diff = std::max(c->max_abs_diff, d);
      c->sum_sq_diff += d * d;
      c->max_abs_logit = std::max(c->max_abs_logit, double(std::fabs(a[i])));
    }
    c->values += v;
    const int top = Argmax(a, v);
    float second = -INFINITY;
    for (int i = 0; i < v; ++i) {
      if (i != top) second = std::max(second, a[i]);
    }
    c->rows.emplace_back(a[top] - second, Argmax(b, v) == top);
  }
}

// At least `min_fraction` of the rows must be judged (top-2 gap beyond the margin), and some row
// when min_fraction > 0: a check whose margin swallows most rows would pass a backend that gets
// the top-1 wrong.
inline void ExpectJudged(const std::string& label, const Comparison& c, const Top1& t,
                         double min_fraction) {
  const int judged = t.agree + t.disagree;
  std::printf("[%s] judged %d of %zu rows (%.0f%%)\n", label.c_str(), judged, c.rows.size(),
              100.0 * judged / std::max<size_t>(c.rows.size(), 1));
  if (min_fraction <= 0) return;
  EXPECT_GE(judged, min_fraction * c.rows.size())
      << label << ": fewer than " << 100 * min_fraction << "% of the rows judged";
  EXPECT_GT(judged, 0) << label << ": no row judged";
}

inline void Print(const std::string& label, uint64_t seed, const Comparison& c, const Top1& t,
                  double tie_margin) {
  std::printf(
      "[%s] seed %llu: %zu rows, top-1 agrees on %d, disagrees on %d, %d near ties (CPU top-2 "
      "gap < %.2f); max |dlogit| %.4f, rms %.4f (max |logit| %.2f)\n",
      label.c_str(), static_cast<unsigned long long>(seed), c.rows.size(), t.agree, t.disagree,
      t.near_ties, tie_margin, c.max_abs_diff, c.rms_diff(), c.max_abs_logit);
}

inline double TieMargin(const Comparison& c) { return std::max(kTieMargin, 8 * c.rms_diff()); }

// Weight-only compute: prints one line (the form run.sh greps: "[<label>] ...") and judges it:
// top-1 identical wherever the CPU's top-2 gap is beyond TieMargin, at least half the rows
// judged, and |Δlogit| within 5% of the largest logit plus 0.5.
inline void ExpectClose(const std::string& label, uint64_t seed, const Comparison& c) {
  const double tie = TieMargin(c);
  const Top1 t = CountTop1(c, tie);
  Print(label, seed, c, t, tie);
  EXPECT_GT(c.rows.size(), 0u) << label;
  EXPECT_EQ(t.disagree, 0) << label;
  ExpectJudged(label, c, t, 0.5);
  EXPECT_LT(c.max_abs_diff, 0.05 * c.max_abs_logit + 0.5) << label;
}

// How far a quantized-activation mode moves the logits, each backend against the CPU in
// weight-only compute on the same checkpoint and prompt.
struct ModeEffect {
  Comparison cpu;  // the CPU in this mode
  Comparison gpu;  // the GPU in this mode
};

// Quantized activations (W8A8, W4A4). The CPU reference rounds its activations where the GPU
// stores bf16 ones and runs prefill attention with the bf16 kernel's P rounding
// (ModelRunnerOptions::cpu_bf16_activations), so both quantize the same activation values to
// the same codes: NVFP4 W4A4 then matches to rms 0.0000 in the last layer of the tiny Qwen3
// (H200). FP8 W8A8 cannot: Hopper's FP8 tensor cores add products with reduced precision (up to
// 2^-13.7 sum |x w|, linear_test.cpp), about half a bf16 ulp of a typical output, so a share of
// every FP8 linear's bf16 outputs round the other way and the next linear's E4M3 codes move; the
// noise compounds layer by layer (tiny Qwen3: rms 0.11 over the model, 0.044 over its last
// layer). Judged here: top-1 identical wherever the CPU's top-2 gap exceeds TieMargin, with at
// least `min_judged` of the rows judged (0 for a whole model with quantized activations: FP8's
// accumulation, and W4A4's rare one-code flips, compound layer by layer; their rows are judged
// by the last-layer check instead); with `effect`, (1) the GPU's mode effect (this mode vs
// the CPU in weight-only) is the CPU's in size, rms 0.6x-1.6x (a GPU that skipped the
// activation quantization sits at its weight-only noise, 0.07-0.10x; a coarser or wrong scale
// moves logits further), and (2) GPU vs CPU in this mode: rms below 2.5x the mode effect's and
// max |Δlogit| below 3x its max plus 0.5. Without `effect` (a weight-only phase reading a
// quantized phase's KV cache): |Δlogit| within 15% of the largest logit plus 0.5.
inline void ExpectCloseQuantized(const std::string& label, uint64_t seed, const Comparison& c,
                                 const ModeEffect* effect, double min_judged) {
  const double tie = TieMargin(c);
  const Top1 t = CountTop1(c, tie);
  Print(label, seed, c, t, tie);
  EXPECT_GT(c.rows.size(), 0u) << label;
  EXPECT_EQ(t.disagree, 0) << label;
  ExpectJudged(label, c, t, min_judged);
  if (effect == nullptr) {
    EXPECT_LT(c.max_abs_diff, 0.15 * c.max_abs_logit + 0.5) << label;
    return;
  }
  const double cpu_rms = std::max(effect->cpu.rms_diff(), 1e-30);
  const double own = effect->gpu.rms_diff() / cpu_rms;
  std::printf(
      "[%s] mode effect (this mode vs CPU weight-only): CPU rms %.4f (max %.4f), GPU rms %.4f "
      "(max %.4f): GPU/CPU %.2f; GPU vs CPU in this mode over the CPU's mode effect: rms %.2f, "
      "max %.2f\n",
      label.c_str(), effect->cpu.rms_diff(), effect->cpu.max_abs_diff, effect->gpu.rms_diff(),
      effect->gpu.max_abs_diff, own, c.rms_diff() / cpu_rms,
      c.max_abs_diff / std::max(effect->cpu.max_abs_diff, 1e-30));
  EXPECT_GT(own, 0.6) << label << ": the GPU's logits barely move in this mode";
  EXPECT_LT(own, 1.6) << label << ": this mode moves the GPU's logits too far";
  EXPECT_LT(c.rms_diff(), 2.5 * effect->cpu.rms_diff()) << label;
  EXPECT_LT(c.max_abs_diff, 3 * effect->cpu.max_abs_diff + 0.5) << label;
}

// "tiny_qwen3" (run.sh makes it; $DQ_TINY_QWEN3) or "smollm2" (the Q4_1 GGUF; $DQ_SMOLLM2).
inline std::string TestModelPath(const std::string& name) {
  if (name == "smollm2") {
    const char* env = std::getenv("DQ_SMOLLM2");
    return env != nullptr ? env
                          : std::string(DQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  const char* env = std::getenv("DQ_TINY_QWEN3");
  return env != nullptr ? env : std::string(DQ_BINARY_DIR) + "/tiny-qwen3";
}

// A directory removed with everything in it when this goes (the models loaded from it must go
// first: they map its files).
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dq-gpu-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `source` quantized to `format` (a codec scheme) under `dir`/`name` and loaded. With
// `calibrate`, nvfp4's activation scales are calibrated on a short text (static global scales,
// as in a real W4A4 checkpoint); without, W4A4 uses per-row dynamic global scales.
inline absl::StatusOr<std::unique_ptr<Model>> QuantizedCopy(
    const Model& source, const std::string& dir, const std::string& name, const std::string& format,
    int group_size = 0, bool calibrate = false) {
  const std::string out = dir + "/" + name;
  QuantizeCheckpointOptions qo;
  qo.format = format;
  qo.group_size = group_size;
  qo.progress = false;
  if (calibrate) {
    qo.calib_file = dir + "/calib.txt";
    std::ofstream f(qo.calib_file);
    for (int i = 0; i < 8; ++i) {
      f << "The quick brown fox jumps over the lazy dog. Paris is the capital of France, and "
           "Berlin is the capital of Germany. 1, 2, 3, 4, 5; a + b = c.\n";
    }
    qo.calib_tokens = 256;
  }
  DQ_RETURN_IF_ERROR(QuantizeCheckpoint(source, out, qo));
  return LoadModel(out);
}

// A prompt of some text and `random_tokens` ids drawn with `seed`.
inline std::vector<int32_t> MixedPrompt(const Model& m, uint64_t seed, int random_tokens = 40) {
  std::vector<int32_t> prompt = m.tokenizer.Encode(
      "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
      false);
  std::mt19937 rng(seed);
  for (int i = 0; i < random_tokens; ++i) {
    prompt.push_back(static_cast<int32_t>(rng() % m.config.vocab_size));
  }
  return prompt;
}

struct PhaseComparison {
  Comparison prefill;  // one-shot (every position) and chunked (last position)
  Comparison decode;   // each decode step's row
};

// Runs `prompt` through both runners: a one-shot prefill with every position's logits on both,
// a chunked prefill (thirds) on the GPU compared at the last position, then `decode_steps`
// steps fed the CPU's greedy tokens to both. Releases its KV blocks.
inline void RunBothAndCompare(ModelRunner& cpu, ModelRunner& gpu,
                              const std::vector<int32_t>& prompt, int decode_steps,
                              PhaseComparison* out) {
  const int n = static_cast<int>(prompt.size());
  KvSequence sc, sg, sg2;
  cpu.kv_pool().extend(sc, n + decode_steps);
  gpu.kv_pool().extend(sg, n + decode_steps);
  gpu.kv_pool().extend(sg2, n);
  BatchLogits lc, lg, lg2;
  ASSERT_TRUE(cpu.Forward(Batch{Phase::kPrefill, {{&sc, prompt, true}}}, &lc).ok());
  ASSERT_TRUE(gpu.Forward(Batch{Phase::kPrefill, {{&sg, prompt, true}}}, &lg).ok());
  Compare(lc, lg, &out->prefill);
  const std::span<const int32_t> all(prompt);
  ASSERT_TRUE(
      gpu.Forward(Batch{Phase::kPrefill, {{&sg2, all.subspan(0, n / 3), false}}}, &lg2).ok());
  ASSERT_TRUE(gpu.Forward(Batch{Phase::kPrefill, {{&sg2, all.subspan(n / 3), false}}}, &lg2).ok());
  {
    BatchLogits last;
    last.vocab = lc.vocab;
    last.values.assign(lc.row(n - 1), lc.row(n - 1) + lc.vocab);
    Compare(last, lg2, &out->prefill);
  }
  int32_t next = Argmax(lc.row(n - 1), lc.vocab);
  for (int step = 0; step < decode_steps; ++step) {
    BatchLogits dc, dg;
    ASSERT_TRUE(cpu.Forward(Batch{Phase::kDecode, {{&sc, std::span(&next, 1), false}}}, &dc).ok());
    ASSERT_TRUE(gpu.Forward(Batch{Phase::kDecode, {{&sg, std::span(&next, 1), false}}}, &dg).ok());
    Compare(dc, dg, &out->decode);
    next = Argmax(dc.row(0), dc.vocab);
  }
  cpu.kv_pool().release(sc);
  gpu.kv_pool().release(sg);
  gpu.kv_pool().release(sg2);
}

// The CPU's last layer and head on the GPU's input to that layer (the GPU's tap of layer L - 2,
// DecoderModel::ForwardFrom): a one-shot prefill (every position's logits), then `decode_steps`
// steps fed the GPU's greedy tokens, each compared with the GPU's logits. What differs is one
// layer's rounding, not the whole model's compounded through every later layer, so the top-1
// of most rows can be judged even where activations are quantized. Needs 2+ layers.
inline void RunLastLayerOnGpuInput(ModelRunner& cpu, ModelRunner& gpu,
                                   const std::vector<int32_t>& prompt, int decode_steps,
                                   PhaseComparison* out) {
  const int first = gpu.config().num_layers - 1;
  ASSERT_GE(first, 1) << "needs a model of two layers or more";
  std::vector<float> in;
  ForwardHooks taps;
  taps.tap_layers = {first - 1};
  taps.on_layer_output = [&](int, std::span<const float> h) { in.assign(h.begin(), h.end()); };
  auto cpu_model = [&](Phase p) -> const DecoderModel& {
    return dynamic_cast<const DecoderModel&>(cpu.forward_model(p));
  };
  const int n = static_cast<int>(prompt.size());
  KvSequence sc, sg;
  cpu.kv_pool().extend(sc, n + decode_steps);
  gpu.kv_pool().extend(sg, n + decode_steps);
  BatchLogits lc, lg;
  ASSERT_TRUE(gpu.Forward(Batch{Phase::kPrefill, {{&sg, prompt, true}}}, &lg, taps).ok());
  ASSERT_TRUE(cpu_model(Phase::kPrefill)
                  .ForwardFrom(first, in, Batch{Phase::kPrefill, {{&sc, prompt, true}}},
                               cpu.kv_pool(), cpu.threads(), &lc)
                  .ok());
  Compare(lc, lg, &out->prefill);
  int32_t next = Argmax(lg.row(n - 1), lg.vocab);
  for (int step = 0; step < decode_steps; ++step) {
    BatchLogits dc, dg;
    const Batch gb{Phase::kDecode, {{&sg, std::span(&next, 1), false}}};
    ASSERT_TRUE(gpu.Forward(gb, &dg, taps).ok());
    const Batch cb{Phase::kDecode, {{&sc, std::span(&next, 1), false}}};
    ASSERT_TRUE(cpu_model(Phase::kDecode)
                    .ForwardFrom(first, in, cb, cpu.kv_pool(), cpu.threads(), &dc)
                    .ok());
    Compare(dc, dg, &out->decode);
    next = Argmax(dg.row(0), dg.vocab);
  }
  cpu.kv_pool().release(sc);
  gpu.kv_pool().release(sg);
}

// The last-layer comparison judged: top-1 identical wherever the CPU's top-2 gap exceeds
// TieMargin, with at least `min_judged` of the rows judged. H200 at this oracle (bf16 rounding
// emulated): nvfp4 W4A4 91-99% on SmolLM2 (rms 0.0000-0.0004), 64-96% on the tiny Qwen3; FP8
// W8A8 37-54% on SmolLM2 and 53-63% on the tiny Qwen3, bounded by the FP8 MMA's accumulation
// (ExpectCloseQuantized), so FP8 asks for a quarter.
inline void ExpectLastLayerClose(const std::string& label, uint64_t seed, const Comparison& c,
                                 double min_judged = 0.5) {
  const double tie = TieMargin(c);
  const Top1 t = CountTop1(c, tie);
  Print(label + " last layer", seed, c, t, tie);
  EXPECT_GT(c.rows.size(), 0u) << label;
  EXPECT_EQ(t.disagree, 0) << label;
  ExpectJudged(label + " last layer", c, t, min_judged);
}

// A prompt of plain English (no random tokens), on which a trained model's next-token
// distributions are mostly confident (wide top-2 gaps).
inline std::vector<int32_t> TextPrompt(const Model& m) {
  return m.tokenizer.Encode(
      "The history of the city goes back more than two thousand years. It was founded on the "
      "banks of a river, where traders met to exchange salt, grain and cloth. Over the "
      "centuries it grew into a center of learning, with a university, a cathedral and a "
      "famous library. Today it is known for its museums, its markets and its food, and "
      "millions of visitors come every year to walk its old streets.",
      false);
}

inline Comparison Merged(const PhaseComparison& p) {
  Comparison c = p.prefill;
  c.Merge(p.decode);
  return c;
}

}  // namespace dq::gpu_test
