// The tokenizer.json we derive from a GGUF file equals the one HF `tokenizers` was given for the
// same model (tests/golden/tokenizer/smollm2, built by an independent script), and round-trips.
#include "engine/model/hf_export.h"

#include <gtest/gtest.h>

#include <fstream>

#include "engine/checkpoint/gguf_file.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

TEST(HfExportTest, SmolLM2TokenizerJsonMatchesTheGoldenFile) {
  auto gguf = GgufFile::Open(testing::SmolLM2Path());
  ASSERT_TRUE(gguf.ok()) << gguf.status() << " (scripts/setup.sh fetches the model)";
  auto exported = HfTokenizerJsonFromGguf(**gguf);
  ASSERT_TRUE(exported.ok()) << exported.status();
  std::ifstream f(std::string(DQ_SOURCE_DIR) + "/tests/golden/tokenizer/smollm2/tokenizer.json");
  const nlohmann::json golden = nlohmann::json::parse(f);
  EXPECT_EQ((*exported)["model"]["vocab"], golden["model"]["vocab"]);
  EXPECT_EQ((*exported)["model"]["merges"], golden["model"]["merges"]);
  EXPECT_EQ((*exported)["pre_tokenizer"], golden["pre_tokenizer"]);
  EXPECT_EQ((*exported)["normalizer"], golden["normalizer"]);
  EXPECT_EQ((*exported)["added_tokens"], golden["added_tokens"]);
}

TEST(HfExportTest, ConfigJsonRoundTripsThroughTheParser) {
  auto model = testing::LoadTinyQwen3();
  ASSERT_NE(model, nullptr);
  auto parsed = ModelConfigFromHfJson(HfConfigJson(model->config));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->architecture, model->config.architecture);
  EXPECT_EQ(parsed->num_layers, model->config.num_layers);
  EXPECT_EQ(parsed->head_dim, model->config.head_dim);
  EXPECT_EQ(parsed->rope_theta, model->config.rope_theta);
  EXPECT_EQ(parsed->rope_style, model->config.rope_style);
  EXPECT_EQ(parsed->eos_token_ids, model->config.eos_token_ids);
}

}  // namespace
}  // namespace dq
