#include "engine/quant/quant_config.h"

#include <gtest/gtest.h>

namespace dq {
namespace {

TEST(QuantConfigTest, ReadsEachDialect) {
  auto none = QuantConfig::FromHfConfig(nlohmann::json::object());
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->quantized());

  auto ct = QuantConfig::FromHfConfig(nlohmann::json::parse(R"({"quantization_config":
      {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
       "ignore": ["lm_head", "re:.*mlp.down_proj"]}})"));
  ASSERT_TRUE(ct.ok()) << ct.status();
  EXPECT_EQ(ct->scheme, "nvfp4");
  EXPECT_TRUE(ct->IsQuantized("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(ct->IsQuantized("lm_head"));
  EXPECT_FALSE(ct->IsQuantized("model.layers.3.mlp.down_proj"));

  auto gptq = QuantConfig::FromHfConfig(nlohmann::json::parse(
      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 64}})"));
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  EXPECT_EQ(gptq->scheme, "int4");
  EXPECT_EQ(gptq->group_size, 64);

  QuantConfig ours;
  ours.method = "dqserve";
  ours.scheme = "lut3";
  auto back = QuantConfig::FromHfConfig({{"quantization_config", ours.ToJson()}});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->scheme, "lut3");
}

TEST(QuantConfigTest, UnknownMethodsAndFormatsAreClearErrors) {
  auto bad = QuantConfig::FromHfConfig(
      nlohmann::json::parse(R"({"quantization_config": {"quant_method": "bitsandbytes"}})"));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("supported: dqserve"), std::string::npos);
  auto fmt = QuantConfig::FromHfConfig(nlohmann::json::parse(
      R"({"quantization_config": {"quant_method": "dqserve", "format": "int5"}})"));
  EXPECT_FALSE(fmt.ok());
  EXPECT_NE(std::string(fmt.status().message()).find("known:"), std::string::npos);
  auto bits = QuantConfig::FromHfConfig(
      nlohmann::json::parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 3}})"));
  EXPECT_FALSE(bits.ok());
}

}  // namespace
}  // namespace dq
