// Whole-model numerics against HF transformers (fp32), from goldens committed with the script
// that made them (tests/golden/model/make_model_golden.py, run on the GPU machine; tiny_gemma3 and
// tiny_qwen3_5 on the dev machine's CPU with the same torch and transformers versions).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "engine/model/model_runner.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

struct GoldenCase {
  std::string golden;  // file under tests/golden/model/
  std::string model_path;
  float max_logit_diff;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.golden; }

nlohmann::json ReadGolden(const std::string& name) {
  std::ifstream f(std::string(DQ_SOURCE_DIR) + "/tests/golden/model/" + name);
  EXPECT_TRUE(f.good()) << "missing golden " << name;
  return f ? nlohmann::json::parse(f) : nlohmann::json();
}

std::vector<float> DecodeLogits(const std::string& b64) {
  std::string bytes;
  EXPECT_TRUE(absl::Base64Unescape(b64, &bytes));
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

int32_t Argmax(const float* v, int n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

class ModelGoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(ModelGoldenTest, LogitsAndGreedyMatchTransformers) {
  const GoldenCase& c = GetParam();
  const nlohmann::json g = ReadGolden(c.golden);
  ASSERT_FALSE(g.is_null());
  auto model = LoadModel(c.model_path);
  ASSERT_TRUE(model.ok()) << model.status();
  ModelRunnerOptions o;
  o.kv_capacity = 2048;
  auto runner = ModelRunner::Create(*(*model)->checkpoint, (*model)->config, o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  for (const auto& p : g["prompts"]) {
    SCOPED_TRACE(p["name"].get<std::string>());
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    // Our tokenizer and chat template must give the reference's ids for the same text.
    EXPECT_EQ((*model)->tokenizer.Encode(p["text"].get<std::string>()), ids);
    const std::vector<float> ref = DecodeLogits(p["last_logits_f32_b64"]);
    const std::vector<int32_t> greedy_ref = p["greedy"].get<std::vector<int32_t>>();
    KvSequence seq;
    (*runner)->kv_pool().extend(seq, static_cast<int>(ids.size() + greedy_ref.size()));
    BatchLogits logits;
    Batch prefill{Phase::kPrefill, {{&seq, ids, false}}};
    ASSERT_TRUE((*runner)->Forward(prefill, &logits).ok());
    ASSERT_EQ(static_cast<size_t>(logits.vocab), ref.size());
    float max_diff = 0;
    for (size_t v = 0; v < ref.size(); ++v) {
      max_diff = std::max(max_diff, std::abs(logits.row(0)[v] - ref[v]));
    }
    std::cout << "[" << c.golden << " " << p["name"].get<std::string>()
              << "] max |dlogit| = " << max_diff << "\n";
    EXPECT_LE(max_diff, c.max_logit_diff);
    std::vector<int32_t> greedy;
    for (size_t step = 0; step < greedy_ref.size(); ++step) {
      greedy.push_back(Argmax(logits.row(0), logits.vocab));
      Batch d{Phase::kDecode, {{&seq, std::span<const int32_t>(&greedy.back(), 1), false}}};
      ASSERT_TRUE((*runner)->Forward(d, &logits).ok());
    }
    EXPECT_EQ(greedy, greedy_ref) << "greedy continuation differs from transformers";
    (*runner)->kv_pool().release(seq);
  }
}

std::string CaseName(size_t index) {
  static const char* const kNames[] = {"SmolLM2", "TinyQwen3", "TinyGemma3", "TinyQwen3_5"};
  return kNames[index];
}

INSTANTIATE_TEST_SUITE_P(
    Models, ModelGoldenTest,
    ::testing::Values(GoldenCase{"smollm2.json", testing::SmolLM2Path(), 1e-2f},
                      GoldenCase{"tiny_qwen3.json", testing::TinyQwen3Path(), 1e-3f},
                      GoldenCase{"tiny_gemma3.json", testing::TinyGemma3Path(), 1e-3f},
                      GoldenCase{"tiny_qwen3_5.json", testing::TinyQwen3_5Path(), 1e-3f}),
    [](const auto& info) { return CaseName(info.index); });

}  // namespace
}  // namespace dq
