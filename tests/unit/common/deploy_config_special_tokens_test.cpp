// [router] special_tokens_in_content (common/deploy_config.h): off unless set to true, and only
// a boolean is accepted (a quoted "true" must not silently mean either value).
#include <gtest/gtest.h>

#include <string>

#include "common/deploy_config.h"

namespace dq {
namespace {

TEST(DeployConfigSpecialTokens, OffByDefault) {
  auto c = ParseDeployConfig("model = \"m\"\n[router]\nport = 8000\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.special_tokens_in_content);
}

TEST(DeployConfigSpecialTokens, ReadsTrueAndFalse) {
  auto on = ParseDeployConfig("model = \"m\"\n[router]\nspecial_tokens_in_content = true\n");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->router.special_tokens_in_content);
  auto off = ParseDeployConfig("model = \"m\"\n[router]\nspecial_tokens_in_content = false\n");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->router.special_tokens_in_content);
}

TEST(DeployConfigSpecialTokens, OnlyABoolean) {
  auto c = ParseDeployConfig("model = \"m\"\n[router]\nspecial_tokens_in_content = \"true\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message())
                .find("[router]: \"special_tokens_in_content\" must be true or false"),
            std::string::npos)
      << c.status();
  // A [router] key: elsewhere it is unknown.
  auto decode = ParseDeployConfig("model = \"m\"\n[decode]\nspecial_tokens_in_content = true\n");
  ASSERT_FALSE(decode.ok());
  EXPECT_NE(std::string(decode.status().message()).find("unknown key"), std::string::npos)
      << decode.status();
}

}  // namespace
}  // namespace dq
