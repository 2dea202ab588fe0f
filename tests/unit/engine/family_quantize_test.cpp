// dq-quantize on the hybrid and sliding-window families (Qwen3.5, Gemma 3): every format applies
// to their projections (GDN in_proj_qkv/z/b/a and out_proj, the gated q_proj, GeGLU MLPs), the
// non-linear tensors (A_log, dt_bias, conv1d, zero-centred norms) are copied exactly in their
// stored convention, and the quantized checkpoints run on the CPU backend: within each format's
// bound of the f32 source, and equal (up to float summation order) to the same weights
// dequantized to f32 (dq-quantize --format f32 of the quantized checkpoint), the format's CPU
// reference. Malformed and unknown tensors are refused by name.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>

#include "engine/checkpoint/safetensors_checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/model_runner.h"
#include "engine/quant/checkpoint_quantizer.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

std::string MakeTempDir() {
  std::string dir = (fs::temp_directory_path() / "dq-family-quantize-XXXXXX").string();
  EXPECT_NE(::mkdtemp(dir.data()), nullptr);
  return dir;
}

// Logits of `ids`: one prefill of the first `prefill` tokens (every position), then one decode
// step per remaining token; rows in position order.
std::vector<std::vector<float>> RunLogits(const Model& m, ComputeMode mode,
                                          const std::vector<int32_t>& ids, int prefill) {
  const PhaseWeights w{m.checkpoint.get(), &m.config, mode, ""};
  ModelRunnerOptions o;
  o.kv_capacity = 256;
  o.state_slots = 1;
  o.threads = 2;
  auto runner = ModelRunner::Create(w, w, o);
  EXPECT_TRUE(runner.ok()) << runner.status();
  if (!runner.ok()) return {};
  KvSequence seq;
  (*runner)->kv_pool().extend(seq, static_cast<int>(ids.size()));
  std::vector<std::vector<float>> rows;
  BatchLogits logits;
  const std::span<const int32_t> all(ids);
  Batch first{Phase::kPrefill, {{&seq, all.first(prefill), true}}};
  EXPECT_TRUE((*runner)->Forward(first, &logits).ok());
  for (int p = 0; p < prefill; ++p) rows.emplace_back(logits.row(p), logits.row(p) + logits.vocab);
  for (size_t t = prefill; t < ids.size(); ++t) {
    Batch step{Phase::kDecode, {{&seq, all.subspan(t, 1), false}}};
    EXPECT_TRUE((*runner)->Forward(step, &logits).ok());
    rows.emplace_back(logits.row(0), logits.row(0) + logits.vocab);
  }
  (*runner)->kv_pool().release(seq);
  return rows;
}

float MaxDiff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
    for (size_t v = 0; v < a[r].size(); ++v) d = std::max(d, std::abs(a[r][v] - b[r][v]));
  }
  return d;
}

float MaxAbs(const std::vector<std::vector<float>>& a) {
  float m = 0;
  for (const auto& r : a) {
    for (float x : r) m = std::max(m, std::abs(x));
  }
  return m;
}

std::vector<int32_t> PromptIds() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back((i * 7919 + 13) % 5000 + 100);
  return ids;
}
constexpr int kPrefill = 32;  // then 8 decode steps

struct FormatCase {
  const char* format;
  int group;
  ComputeMode mode;
  bool calibrate;
  // max |dlogit| against the f32 source on PromptIds(), per family (measured x ~2).
  float qwen3_5_bound, gemma3_bound;
};

void PrintTo(const FormatCase& c, std::ostream* os) {
  *os << c.format << "-g" << c.group << "-" << ComputeModeName(c.mode);
}

// Every non-linear tensor of `source`'s program (norms, conv, dt_bias, A_log) is in `quantized`
// under the same name with the same shape and the same values.
void ExpectVectorsCopied(const Model& source, const Model& quantized) {
  auto program = BindModelProgram(*source.checkpoint, source.config);
  ASSERT_TRUE(program.ok()) << program.status();
  const Architecture* arch = FindArchitecture(source.config.architecture);
  const TensorNames names = ArchitectureTensorNames(*arch, false);
  int checked = 0;
  for (int layer = 0; layer < static_cast<int>(program->layers.size()); ++layer) {
    for (const Block& b : program->layers[layer].blocks) {
      ForEachBlockTensor(
          b, [](const char*, LinearInput, const LinearWeight&) {},
          [&](const char* role, bool bare, const std::vector<float>&) {
            const std::string name = bare ? names.LayerBare(layer, role) : names.Layer(layer, role);
            const TensorView* s = source.checkpoint->Find(name);
            const TensorView* q = quantized.checkpoint->Find(name);
            ASSERT_TRUE(s != nullptr && q != nullptr) << name;
            EXPECT_EQ(s->shape, q->shape) << name;
            ASSERT_EQ(s->dtype, DType::kF32) << name;  // the fixture's source is f32
            ASSERT_EQ(q->dtype, DType::kF32) << name;
            EXPECT_EQ(std::memcmp(s->data, q->data, s->nbytes), 0) << name << " changed";
            ++checked;
          });
    }
  }
  EXPECT_GT(checked, 0);
}

class FamilyQuantizeTest : public ::testing::TestWithParam<std::tuple<std::string, FormatCase>> {};

TEST_P(FamilyQuantizeTest, RunsWithinBoundAndEqualsItsDequantizedImage) {
  const auto& [family, c] = GetParam();
  const std::string src_path =
      family == "qwen3_5" ? testing::TinyQwen3_5Path() : testing::TinyGemma3Path();
  auto source = LoadModel(src_path);
  ASSERT_TRUE(source.ok()) << source.status() << " (run through ctest: its fixture makes it)";
  const std::string dir = MakeTempDir();
  QuantizeCheckpointOptions o;
  o.format = c.format;
  o.group_size = c.group;
  o.progress = false;
  o.threads = 2;
  o.embedding_dtype = DType::kF32;  // the bound judges the linears alone
  if (c.calibrate) o.calib_file = std::string(DQ_SOURCE_DIR) + "/tests/data/calib_text.txt";
  ASSERT_TRUE(QuantizeCheckpoint(**source, dir + "/q", o).ok());
  auto quantized = LoadModel(dir + "/q");
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  EXPECT_EQ((*quantized)->config.quant.scheme, c.format);
  ExpectVectorsCopied(**source, **quantized);
  auto program = BindModelProgram(*(*quantized)->checkpoint, (*quantized)->config);
  ASSERT_TRUE(program.ok()) << program.status();
  int linears = 0;
  program->ForEachLinear([&](const LinearWeight& w) {
    ++linears;
    EXPECT_NE(w.codec, nullptr);
    // Calibration reached every projection, the GDN's included.
    if (c.calibrate) EXPECT_GT(w.act_global_scale, 0.0f);
  });
  EXPECT_GT(linears, 0);

  const std::vector<int32_t> ids = PromptIds();
  const auto ref = RunLogits(**source, ComputeMode::kWeightOnly, ids, kPrefill);
  const auto run = RunLogits(**quantized, c.mode, ids, kPrefill);
  const float d_source = MaxDiff(ref, run);
  const float bound = family == "qwen3_5" ? c.qwen3_5_bound : c.gemma3_bound;
  // Dequantized to f32 by dq-quantize, then run: the format's CPU reference.
  QuantizeCheckpointOptions deq = o;
  deq.format = "f32";
  deq.calib_file.clear();
  ASSERT_TRUE(QuantizeCheckpoint(**quantized, dir + "/deq", deq).ok());
  auto dequantized = LoadModel(dir + "/deq");
  ASSERT_TRUE(dequantized.ok()) << dequantized.status();
  EXPECT_FALSE((*dequantized)->config.quant.quantized());
  const auto image = RunLogits(**dequantized, ComputeMode::kWeightOnly, ids, kPrefill);
  const auto weight_only = RunLogits(**quantized, ComputeMode::kWeightOnly, ids, kPrefill);
  const float d_image = MaxDiff(image, weight_only);
  std::cout << family << " " << c.format << " g" << c.group << " " << ComputeModeName(c.mode)
            << ": max |dlogit| vs f32 source " << d_source << " (bound " << bound
            << "), weight-only vs dequantized " << d_image << ", max |logit| " << MaxAbs(ref)
            << "\n";
  EXPECT_GT(MaxAbs(ref), 0.5f);
  EXPECT_GT(d_source, 0.0f);  // the format did something
  EXPECT_LE(d_source, bound);
  EXPECT_LE(d_image, 2e-5f * MaxAbs(ref));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Bounds: the measured max |dlogit| over 40 positions x 49216 logits, x ~1.5 (the tiny random
// models are chaotic: Qwen3.5's recurrent state and 49K-way logits of magnitude ~8 amplify
// rounding, so even int8 moves the worst logit by ~2.6 there; the mean KL is in
// eval_families_test).
constexpr FormatCase kFormats[] = {
    {"int8", 32, ComputeMode::kWeightOnly, false, 4.0f, 0.4f},
    {"int4", 32, ComputeMode::kWeightOnly, false, 14.0f, 5.0f},
    {"int4", 64, ComputeMode::kWeightOnly, false, 14.0f, 5.0f},
    {"int3", 32, ComputeMode::kWeightOnly, false, 16.0f, 8.5f},
    {"int2", 32, ComputeMode::kWeightOnly, false, 18.0f, 12.0f},
    {"nvfp4", 0, ComputeMode::kWeightOnly, false, 16.0f, 5.0f},
    {"lut2", 32, ComputeMode::kWeightOnly, false, 18.0f, 10.5f},
    {"lut3", 32, ComputeMode::kWeightOnly, false, 17.0f, 7.5f},
    {"fp8", 0, ComputeMode::kW8A8, false, 14.0f, 3.0f},
    {"nvfp4", 0, ComputeMode::kW4A4, true, 16.5f, 7.0f},
};

INSTANTIATE_TEST_SUITE_P(Formats, FamilyQuantizeTest,
                         ::testing::Combine(::testing::Values("qwen3_5", "gemma3"),
                                            ::testing::ValuesIn(kFormats)),
                         [](const auto& info) {
                           const FormatCase& c = std::get<1>(info.param);
                           return std::get<0>(info.param) + "_" + c.format + "_g" +
                                  std::to_string(c.group) + "_" + ComputeModeName(c.mode);
                         });

// A copy of the checkpoint at `src` in `dst` (config and tokenizer files copied) whose tensors
// `edit` may change, drop or add to (`storage` owns new bytes).
void RewriteCheckpoint(const std::string& src, const std::string& dst,
                       const std::function<void(std::vector<SafetensorsEntry>&,
                                                std::deque<std::vector<uint8_t>>&)>& edit) {
  auto ckpt = SafetensorsCheckpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<SafetensorsEntry> entries;
  for (const TensorView& t : (*ckpt)->tensors()) {
    entries.push_back({t.name, t.dtype, t.shape, t.data});
  }
  std::deque<std::vector<uint8_t>> storage;
  edit(entries, storage);
  fs::create_directories(dst);
  ASSERT_TRUE(WriteSafetensors(dst + "/model.safetensors", entries, {{"format", "pt"}}).ok());
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    if (fs::exists(fs::path(src) / f)) fs::copy_file(fs::path(src) / f, fs::path(dst) / f);
  }
}

TEST(FamilyQuantizeRefusalTest, UnknownAndMalformedTensorsAreRefusedByName) {
  const std::string dir = MakeTempDir();
  QuantizeCheckpointOptions o;
  o.format = "int4";
  o.group_size = 32;
  o.progress = false;
  const std::vector<float> extra(4, 1.0f);
  // An unknown tensor in a GDN layer: not dropped silently.
  RewriteCheckpoint(testing::TinyQwen3_5Path(), dir + "/extra", [&](auto& e, auto&) {
    e.push_back({"model.layers.0.linear_attn.extra_bias", DType::kF32, {4}, extra.data()});
  });
  auto extra_model = LoadModel(dir + "/extra");
  ASSERT_TRUE(extra_model.ok()) << extra_model.status();
  absl::Status s = QuantizeCheckpoint(**extra_model, dir + "/extra-q", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("model.layers.0.linear_attn.extra_bias"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir + "/extra-q/config.json"));
  // A_log of the wrong length.
  RewriteCheckpoint(testing::TinyQwen3_5Path(), dir + "/alog", [&](auto& e, auto&) {
    for (SafetensorsEntry& t : e) {
      if (t.name == "model.layers.1.linear_attn.A_log") t.shape = {3};
    }
  });
  auto alog = LoadModel(dir + "/alog");
  ASSERT_TRUE(alog.ok()) << alog.status();
  s = QuantizeCheckpoint(**alog, dir + "/alog-q", o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("model.layers.1.linear_attn.A_log"), std::string::npos) << s;
  // A quantized checkpoint whose in_proj_qkv scales lost a row: loading it names the tensor.
  ASSERT_TRUE(QuantizeCheckpoint(**LoadModel(testing::TinyQwen3_5Path()), dir + "/q", o).ok());
  RewriteCheckpoint(dir + "/q", dir + "/cut", [&](auto& e, auto&) {
    for (SafetensorsEntry& t : e) {
      if (t.name == "model.layers.0.linear_attn.in_proj_qkv.scales") --t.shape[0];
    }
  });
  auto cut = LoadModel(dir + "/cut");
  ASSERT_TRUE(cut.ok()) << cut.status();
  auto program = BindModelProgram(*(*cut)->checkpoint, (*cut)->config);
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.status().message().find("model.layers.0.linear_attn.in_proj_qkv"),
            std::string::npos)
      << program.status();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace dq
