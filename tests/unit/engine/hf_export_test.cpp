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

// The families' own fields (what a dq-quantize output from their GGUF files needs), set away
// from their defaults so a field HfConfigJson drops shows.
TEST(HfExportTest, Gemma3ConfigJsonRoundTrips) {
  const nlohmann::json src = {
      {"model_type", "gemma3_text"},
      {"vocab_size", 300},
      {"hidden_size", 64},
      {"intermediate_size", 96},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 16},
      {"max_position_embeddings", 512},
      {"sliding_window", 24},
      {"rope_theta", 50000.0},
      {"rope_local_base_freq", 7000.0},
      {"rope_scaling", {{"rope_type", "linear"}, {"factor", 4.0}}},
      {"query_pre_attn_scalar", 20.0},
      {"layer_types",
       {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}}};
  auto a = ModelConfigFromHfJson(src);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ModelConfigFromHfJson(HfConfigJson(*a));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->architecture, "gemma3");
  EXPECT_EQ(b->sliding_window, 24);
  EXPECT_EQ(b->sliding_layers, a->sliding_layers);
  EXPECT_EQ(b->rope_theta, 50000.0f);
  EXPECT_EQ(b->rope_local_theta, 7000.0f);
  EXPECT_EQ(b->rope_linear_factor, 4.0f);
  EXPECT_FLOAT_EQ(b->attention_scale, a->attention_scale);
  EXPECT_TRUE(b->gelu_mlp);
}

TEST(HfExportTest, Qwen3_5ConfigJsonRoundTrips) {
  const nlohmann::json src = {
      {"model_type", "qwen3_5_text"},
      {"vocab_size", 300},
      {"hidden_size", 64},
      {"intermediate_size", 96},
      {"num_hidden_layers", 3},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 32},
      {"max_position_embeddings", 512},
      {"linear_num_key_heads", 2},
      {"linear_num_value_heads", 6},
      {"linear_key_head_dim", 8},
      {"linear_value_head_dim", 12},
      {"linear_conv_kernel_dim", 3},
      {"rope_parameters", {{"rope_theta", 123456.0}, {"partial_rotary_factor", 0.5}}},
      {"layer_types", {"linear_attention", "full_attention", "linear_attention"}}};
  auto a = ModelConfigFromHfJson(src);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ModelConfigFromHfJson(HfConfigJson(*a));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->architecture, "qwen3_5");
  EXPECT_EQ(b->linear_layers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(b->gdn_key_heads, 2);
  EXPECT_EQ(b->gdn_value_heads, 6);
  EXPECT_EQ(b->gdn_key_dim, 8);
  EXPECT_EQ(b->gdn_value_dim, 12);
  EXPECT_EQ(b->gdn_conv_kernel, 3);
  EXPECT_EQ(b->rotary_dim, 16);
  EXPECT_EQ(b->rope_theta, 123456.0f);
  EXPECT_TRUE(b->attn_output_gate);
  EXPECT_FALSE(b->gdn_tiled_value_heads);  // HF's grouped order, whatever the source's
}

}  // namespace
}  // namespace dq
