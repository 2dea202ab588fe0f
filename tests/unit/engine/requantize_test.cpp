// The lm_head quantized at load (PhaseWeights::lm_head, engine/quant/requantize.h): the stored
// matrix requantized into a weight-only scheme equals that scheme's quantization of the same
// values, the model's logits move only by that quantization's noise, and bad formats are refused
// with the list of choices.
#include "engine/quant/requantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/model/model_runner.h"
#include "engine/quant/ggml_blocks.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

TEST(LmHeadFormat, OnlyTheListedFormatsAreAccepted) {
  for (std::string_view f : kLmHeadFormats) EXPECT_TRUE(CheckLmHeadFormat(f).ok()) << f;
  EXPECT_TRUE(CheckLmHeadFormat("").ok());
  for (const char* bad : {"int5", "fp8", "INT4", "lut2", "q4_k"}) {
    const absl::Status s = CheckLmHeadFormat(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("int8, int4, int3, int2, nvfp4"), std::string::npos) << s;
  }
  EXPECT_TRUE(KeepsStoredLmHead("bf16"));
  EXPECT_TRUE(KeepsStoredLmHead(""));
  EXPECT_FALSE(KeepsStoredLmHead("int4"));
}

// A bf16 [out, in] matrix of random values.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  LinearWeight w;
  Bf16Matrix(int64_t out, int64_t in, uint64_t seed) : bits(out * in) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (auto& b : bits) b = F32ToBF16(d(rng));
    w.dtype = DType::kBF16;
    w.out_features = out;
    w.in_features = in;
    w.row_bytes = in * 2;
    w.data = reinterpret_cast<const uint8_t*>(bits.data());
  }
};

TEST(RequantizeLinear, EqualsTheCodecsQuantizationOfTheStoredValues) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  // 192 inputs: int groups of 64 (128 does not divide it); nvfp4's blocks of 16.
  const Bf16Matrix m(37, 192, seed);
  std::vector<float> dense(37 * 192);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = BF16ToF32(m.bits[i]);
  for (const char* format : {"int8", "int4", "int3", "int2", "nvfp4"}) {
    SCOPED_TRACE(format);
    absl::StatusOr<LinearWeight> q = RequantizeLinear(m.w, format);
    ASSERT_TRUE(q.ok()) << q.status();
    ASSERT_NE(q->codec, nullptr);
    EXPECT_EQ(q->codec->scheme(), format);
    EXPECT_EQ(q->mode, ComputeMode::kWeightOnly);
    EXPECT_EQ(q->out_features, 37);
    EXPECT_EQ(q->in_features, 192);
    QuantizeOptions qo;
    qo.group_size = std::string_view(format) == "nvfp4" ? 0 : 64;
    if (qo.group_size != 0) EXPECT_EQ(q->quantized.group_size, 64);
    absl::StatusOr<QuantizedTensors> want = q->codec->Quantize(dense.data(), 37, 192, qo);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> got_row(192), want_row(192);
    double err = 0, norm = 0;
    for (int64_t r = 0; r < 37; ++r) {
      q->codec->DequantizeRow(q->quantized, r, got_row.data());
      q->codec->DequantizeRow(want->view, r, want_row.data());
      ASSERT_EQ(got_row, want_row) << "row " << r;
      for (int i = 0; i < 192; ++i) {
        err += std::pow(got_row[i] - dense[r * 192 + i], 2);
        norm += std::pow(dense[r * 192 + i], 2);
      }
    }
    EXPECT_LT(std::sqrt(err / norm), 0.6) << "relative rms error of the requantized matrix";
  }
}

TEST(RequantizeLinear, RefusesShapesNoGroupDivides) {
  const Bf16Matrix m(4, 48, 1);  // 48: not a multiple of 32
  absl::StatusOr<LinearWeight> q = RequantizeLinear(m.w, "int4");
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q.status().message().find("keep lm_head bf16"), std::string::npos) << q.status();
  EXPECT_FALSE(RequantizeLinear(m.w, "bf16").ok());
}

// The tiny Qwen3 with its lm_head in int8 and int4: the logits stay within that quantization's
// noise of the stored lm_head's, int8 closer than int4, and the greedy token mostly agrees.
TEST(RequantizeLinear, ModelLogitsMoveByTheLmHeadsQuantizationOnly) {
  std::unique_ptr<Model> m = testing::LoadTinyQwen3();
  ASSERT_NE(m, nullptr);
  std::mt19937 rng(std::random_device{}());
  std::vector<int32_t> tokens(24);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % m->config.vocab_size);
  auto logits = [&](const std::string& lm_head) {
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = 64;
    const PhaseWeights w{m->checkpoint.get(), &m->config, ComputeMode::kWeightOnly, lm_head};
    auto r = ModelRunner::Create(w, w, o);
    EXPECT_TRUE(r.ok()) << r.status();
    BatchLogits out;
    if (!r.ok()) return out;
    KvSequence seq;
    (*r)->kv_pool().extend(seq, static_cast<int>(tokens.size()));
    EXPECT_TRUE((*r)->Forward(Batch{Phase::kPrefill, {{&seq, tokens, true}}}, &out).ok());
    (*r)->kv_pool().release(seq);
    return out;
  };
  const BatchLogits base = logits("bf16");
  auto rms = [&](const BatchLogits& x) {
    double s = 0;
    for (size_t i = 0; i < base.values.size(); ++i) s += std::pow(x.values[i] - base.values[i], 2);
    return std::sqrt(s / base.values.size());
  };
  const BatchLogits i8 = logits("int8"), i4 = logits("int4");
  ASSERT_EQ(i8.values.size(), base.values.size());
  ASSERT_EQ(i4.values.size(), base.values.size());
  const double e8 = rms(i8), e4 = rms(i4);
  EXPECT_GT(e8, 0.0);
  EXPECT_LT(e8, e4);
  double base_rms = 0;
  for (float v : base.values) base_rms += double{v} * v;
  base_rms = std::sqrt(base_rms / base.values.size());
  EXPECT_LT(e4, 0.2 * base_rms) << "int4 lm_head moved the logits too far";
  int agree = 0;
  const int rows = static_cast<int>(base.values.size() / base.vocab);
  for (int r = 0; r < rows; ++r) {
    const float* a = base.row(r);
    const float* b = i8.row(r);
    agree += std::max_element(a, a + base.vocab) - a == std::max_element(b, b + base.vocab) - b;
  }
  EXPECT_GE(agree, rows * 3 / 4) << "int8 lm_head changed the greedy token of many rows";
}

}  // namespace
}  // namespace dq
