// [router] tool_call_parser (common/deploy_config.h): "auto" unless set, one of the parser names
// dq-router --tool-call-parser takes, anything else refused with the choices.
#include <gtest/gtest.h>

#include <string>

#include "common/deploy_config.h"

namespace dq {
namespace {

TEST(DeployConfigToolCallParser, AutoByDefault) {
  auto c = ParseDeployConfig("model = \"m\"\n[router]\nport = 8000\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router.tool_call_parser, "auto");
}

TEST(DeployConfigToolCallParser, ReadsEachName) {
  for (const char* name : {"auto", "hermes", "llama3_json", "mistral", "none"}) {
    auto c = ParseDeployConfig(std::string("model = \"m\"\n[router]\ntool_call_parser = \"") +
                               name + "\"\n");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->router.tool_call_parser, name);
  }
}

TEST(DeployConfigToolCallParser, RefusesOtherNames) {
  auto c = ParseDeployConfig("model = \"m\"\n[router]\ntool_call_parser = \"qwen\"\n");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("tool_call_parser must be"), std::string::npos)
      << c.status();
  auto n = ParseDeployConfig("model = \"m\"\n[router]\ntool_call_parser = 1\n");
  EXPECT_FALSE(n.ok());
}

}  // namespace
}  // namespace dq
