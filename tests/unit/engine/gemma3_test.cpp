// Gemma 3's architecture file: what it reads from config.json (both transformers 4 and 5
// layouts), the program it binds, and the backends that refuse it until they run it. Its
// numerics against transformers are in model_golden_test (TinyGemma3); dq-quantize on it in
// family_quantize_test.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/model/architecture.h"
#include "engine/model/decode_schedule.h"
#include "engine/model/model_config.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

nlohmann::json BaseConfig() {
  return {{"model_type", "gemma3_text"},
          {"vocab_size", 256},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 7},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"max_position_embeddings", 512},
          {"sliding_window", 32},
          {"query_pre_attn_scalar", 64}};
}

TEST(Gemma3ConfigTest, ReadsTransformers5LayerTypesAndRopeParameters) {
  nlohmann::json j = BaseConfig();
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention"};
  j["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  auto c = ModelConfigFromHfJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "gemma3");
  EXPECT_EQ(c->sliding_window, 32);
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->rope_linear_factor, 8.0f);
  EXPECT_FLOAT_EQ(c->rope_local_theta, 1e4f);
  EXPECT_FLOAT_EQ(c->attention_scale, 1.0f / 8.0f);  // query_pre_attn_scalar 64
  EXPECT_TRUE(c->gelu_mlp);
  EXPECT_FALSE(c->llama_layer());
}

TEST(Gemma3ConfigTest, ReadsTransformers4FlatFields) {
  nlohmann::json j = BaseConfig();
  j["sliding_window_pattern"] = 3;
  j["rope_theta"] = 2e6;
  j["rope_local_base_freq"] = 5e3;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto c = ModelConfigFromHfJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  // Every third layer is global.
  EXPECT_EQ(c->sliding_layers, (std::vector<bool>{true, true, false, true, true, false, true}));
  EXPECT_FLOAT_EQ(c->rope_theta, 2e6f);
  EXPECT_FLOAT_EQ(c->rope_local_theta, 5e3f);
  EXPECT_FLOAT_EQ(c->rope_linear_factor, 4.0f);
}

TEST(Gemma3ConfigTest, RefusesWhatItDoesNotCompute) {
  nlohmann::json capped = BaseConfig();
  capped["final_logit_softcapping"] = 30.0;
  EXPECT_EQ(ModelConfigFromHfJson(capped).status().code(), absl::StatusCode::kUnimplemented);
  nlohmann::json act = BaseConfig();
  act["hidden_activation"] = "relu";
  EXPECT_EQ(ModelConfigFromHfJson(act).status().code(), absl::StatusCode::kUnimplemented);
  nlohmann::json yarn = BaseConfig();
  yarn["rope_parameters"] = {{"full_attention", {{"rope_type", "yarn"}, {"factor", 4.0}}}};
  EXPECT_EQ(ModelConfigFromHfJson(yarn).status().code(), absl::StatusCode::kUnimplemented);
  nlohmann::json types = BaseConfig();
  types["layer_types"] = {"full_attention"};  // 1 entry for 7 layers
  EXPECT_EQ(ModelConfigFromHfJson(types).status().code(), absl::StatusCode::kInvalidArgument);
}

class TinyGemma3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModel(testing::TinyGemma3Path());
    ASSERT_TRUE(m.ok()) << m.status() << " (run through ctest: its fixture makes the model)";
    model_ = std::move(*m);
  }
  std::unique_ptr<Model> model_;
};

TEST_F(TinyGemma3Test, BindsSandwichNormsWindowsAndTheEmbeddingScale) {
  auto p = BindModelProgram(*model_->checkpoint, model_->config);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FLOAT_EQ(p->embedding_scale, 8.0f);  // sqrt(64)
  ASSERT_EQ(p->layers.size(), 6u);
  for (size_t i = 0; i < p->layers.size(); ++i) {
    const auto* a = FindBlock<AttentionBlock>(p->layers[i]);
    const auto* m = FindBlock<MlpBlock>(p->layers[i]);
    ASSERT_TRUE(a != nullptr && m != nullptr);
    EXPECT_TRUE(a->has_qk_norm());
    EXPECT_EQ(a->post_norm.size(), 64u);
    EXPECT_EQ(m->post_norm.size(), 64u);
    EXPECT_EQ(m->activation, Activation::kGeluTanh);
    const bool global = i == 5;
    EXPECT_EQ(a->window, global ? 0 : 8) << i;
    EXPECT_EQ(a->local_rope, !global) << i;
    // The checkpoint's norms are drawn around 0; bound, they multiply by 1 + w.
    double mean = 0;
    for (float w : a->norm) mean += w / a->norm.size();
    EXPECT_NEAR(mean, 1.0, 0.1) << i;
  }
}

TEST_F(TinyGemma3Test, OtherBackendsRefuseIt) {
  auto p = BindModelProgram(*model_->checkpoint, model_->config);
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status cuda = p->RequireLlamaBlocks("CUDA");
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cuda.message().find("CUDA backend does not run"), std::string::npos) << cuda;
  EXPECT_EQ(PlanDecodeStep(*p, model_->config, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The Llama layer passes.
  auto qwen = LoadModel(testing::TinyQwen3Path());
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  auto qp = BindModelProgram(*(*qwen)->checkpoint, (*qwen)->config);
  ASSERT_TRUE(qp.ok());
  EXPECT_TRUE(qp->RequireLlamaBlocks("CUDA").ok());
}

}  // namespace
}  // namespace dq
