// The deployment TOML's ODP keys (common/deploy_config.h): `odp = true` or an [odp] table, and
// the start-up errors for a configuration ODP cannot serve.
#include <gtest/gtest.h>

#include <string>

#include "common/deploy_config.h"

namespace dq {
namespace {

constexpr char kBase[] =
    "model = \"m\"\n"
    "[prefill]\nweights = \"ckpt/fp8\"\ncompute = \"w8a8\"\ndevice = \"cuda:1\"\n"
    "[decode]\nweights = \"ckpt/int2\"\ndevice = \"cuda:1\"\n";

std::string Error(const std::string& toml) {
  auto c = ParseDeployConfig(toml, "/base");
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(DeployConfigOdp, OffByDefault) {
  auto c = ParseDeployConfig(kBase, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->odp.enabled);
}

TEST(DeployConfigOdp, ABooleanTurnsItOnWithDefaults) {
  auto c = ParseDeployConfig(std::string("odp = true\n") + kBase, "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->odp.enabled);
  EXPECT_EQ(c->odp.crossover_tokens, 0);
  EXPECT_EQ(c->odp.slots, 2);
  EXPECT_EQ(c->odp.source, "disk");
  EXPECT_EQ(c->odp.image_dir, "");
}

TEST(DeployConfigOdp, ATableSetsItsKeysAndResolvesTheImageDir) {
  auto c = ParseDeployConfig(std::string(kBase) +
                                 "[odp]\ncrossover_tokens = 2048\nslots = 3\nsource = \"host\"\n"
                                 "image_dir = \"scratch\"\n",
                             "/base");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->odp.enabled);
  EXPECT_EQ(c->odp.crossover_tokens, 2048);
  EXPECT_EQ(c->odp.slots, 3);
  EXPECT_EQ(c->odp.source, "host");
  EXPECT_EQ(c->odp.image_dir, "/base/scratch");
  auto off = ParseDeployConfig(std::string(kBase) + "[odp]\nenabled = false\n", "/base");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->odp.enabled);
}

TEST(DeployConfigOdp, ConfigurationsItCannotServeAreRefused) {
  EXPECT_NE(Error("odp = \"yes\"\n" + std::string(kBase)).find("\"odp\" must be true or false"),
            std::string::npos);
  EXPECT_NE(Error(std::string(kBase) + "[odp]\nslots = 1\n").find("slots must be >= 2"),
            std::string::npos);
  EXPECT_NE(Error(std::string(kBase) + "[odp]\nsource = \"ssd\"\n").find("\"disk\" or \"host\""),
            std::string::npos);
  EXPECT_NE(Error(std::string(kBase) + "[odp]\nslot = 3\n").find("[odp]: unknown key \"slot\""),
            std::string::npos);
  // No prefill checkpoint of its own: nothing to stream.
  EXPECT_NE(Error("odp = true\nmodel = \"m\"\n[prefill]\ndevice = \"cuda\"\n[decode]\n"
                  "device = \"cuda\"\n")
                .find("set [prefill] weights"),
            std::string::npos);
  // Two GPUs, or the CPU: not colocated.
  EXPECT_NE(Error("odp = true\nmodel = \"m\"\n[prefill]\nweights = \"p\"\ndevice = \"cuda:0\"\n"
                  "[decode]\ndevice = \"cuda:1\"\n")
                .find("one GPU"),
            std::string::npos);
  EXPECT_NE(Error("odp = true\nmodel = \"m\"\n[prefill]\nweights = \"p\"\n").find("one GPU"),
            std::string::npos);
}

}  // namespace
}  // namespace dq
