// [prefill] attention (common/deploy_config.h): "bf16" by default, "fp8" for an FP8 W8A8 prefill
// on a GPU (also under ODP) or on the CPU (emulated), and errors that name the key for any other
// value or compute mode.
#include <gtest/gtest.h>

#include <string>

#include "common/deploy_config.h"

namespace dq {
namespace {

constexpr char kFp8Prefill[] =
    "model = \"m\"\n"
    "[prefill]\nweights = \"ckpt/fp8\"\ncompute = \"w8a8\"\ndevice = \"cuda:0\"\n";

std::string Error(const std::string& toml) {
  auto c = ParseDeployConfig(toml, "/base");
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(DeployConfigAttention, Bf16ByDefault) {
  auto c = ParseDeployConfig("model = \"m\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.attention, "bf16");
  auto gpu = ParseDeployConfig(std::string(kFp8Prefill) + "[decode]\ndevice = \"cuda:1\"\n");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->prefill.attention, "bf16");
}

TEST(DeployConfigAttention, Fp8ForAnFp8PrefillOnAGpu) {
  auto c = ParseDeployConfig(std::string(kFp8Prefill) + "attention = \"fp8\"\n" +
                             "[decode]\ndevice = \"cuda:1\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.attention, "fp8");
  // ODP: the streamed FP8 prefill checkpoint, both phases on one GPU.
  auto odp = ParseDeployConfig("odp = true\n" + std::string(kFp8Prefill) +
                               "attention = \"fp8\"\n[decode]\ndevice = \"cuda:0\"\n");
  ASSERT_TRUE(odp.ok()) << odp.status();
  EXPECT_EQ(odp->prefill.attention, "fp8");
  EXPECT_TRUE(odp->odp.enabled);
  auto bf16 = ParseDeployConfig("model = \"m\"\n[prefill]\nattention = \"bf16\"\n");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->prefill.attention, "bf16");
}

TEST(DeployConfigAttention, OtherValuesAreRefusedByName) {
  const std::string bad =
      Error(std::string(kFp8Prefill) + "attention = \"fp16\"\n[decode]\ndevice = \"cuda:1\"\n");
  EXPECT_NE(bad.find("[prefill] attention must be \"bf16\" or \"fp8\", got \"fp16\""),
            std::string::npos)
      << bad;
  EXPECT_NE(
      Error("model = \"m\"\n[prefill]\nattention = 8\n").find("\"attention\" must be a string"),
      std::string::npos);
  // A prefill key only: the decode attention is unchanged.
  EXPECT_NE(Error("model = \"m\"\n[decode]\nattention = \"fp8\"\n")
                .find("[decode]: unknown key \"attention\""),
            std::string::npos);
}

TEST(DeployConfigAttention, Fp8OnTheCpuIsEmulated) {
  auto c = ParseDeployConfig("model = \"m\"\n[prefill]\ncompute = \"w8a8\"\nattention = \"fp8\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.attention, "fp8");
  EXPECT_EQ(c->prefill.device, "cpu");
}

TEST(DeployConfigAttention, Fp8NeedsW8a8) {
  // On the CPU, weight-only compute.
  const std::string cpu = Error("model = \"m\"\n[prefill]\nattention = \"fp8\"\n");
  EXPECT_NE(cpu.find("[prefill] attention = \"fp8\" is only for compute = \"w8a8\""),
            std::string::npos)
      << cpu;
  EXPECT_NE(cpu.find("got compute = \"weight_only\""), std::string::npos) << cpu;
  // Another compute mode on a GPU.
  const std::string w4a4 = Error(
      "model = \"m\"\n[prefill]\ncompute = \"w4a4\"\ndevice = \"cuda:0\"\nattention = \"fp8\"\n"
      "[decode]\ndevice = \"cuda:1\"\n");
  EXPECT_NE(w4a4.find("only for compute = \"w8a8\""), std::string::npos) << w4a4;
  EXPECT_NE(w4a4.find("got compute = \"w4a4\""), std::string::npos) << w4a4;
  const std::string weight_only = Error(
      "model = \"m\"\n[prefill]\ndevice = \"cuda:0\"\nattention = \"fp8\"\n"
      "[decode]\ndevice = \"cuda:1\"\n");
  EXPECT_NE(weight_only.find("got compute = \"weight_only\""), std::string::npos) << weight_only;
}

}  // namespace
}  // namespace dq
