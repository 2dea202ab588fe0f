// The deployment TOML: defaults, overrides, path resolution, and errors that name the key.
#include "common/deploy_config.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace dq {
namespace {

void ExpectError(const char* toml, const char* needle) {
  auto c = ParseDeployConfig(toml);
  ASSERT_FALSE(c.ok()) << toml;
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status();
}

TEST(DeployConfig, DefaultsAndOverrides) {
  auto c = ParseDeployConfig(R"(
model = "m.gguf"
[router]
port = 9000
max_queue = 3
[transfer]
backend = "ucx"
[prefill]
compute = "w4a4"
weights = "/abs/nvfp4"
token_budget = 512
[decode]
weights = "int2"
max_batch = 8
)",
                             "/deploy");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "/deploy/m.gguf");
  EXPECT_EQ(c->router.port, 9000);
  EXPECT_EQ(c->router.max_queue, 3);
  EXPECT_EQ(c->router.max_in_flight, 4);  // default kept
  EXPECT_EQ(c->transfer.backend, "ucx");
  EXPECT_EQ(c->prefill.compute, "w4a4");
  EXPECT_EQ(c->prefill.weights, "/abs/nvfp4");
  EXPECT_EQ(c->prefill.token_budget, 512);
  EXPECT_EQ(c->decode.weights, "/deploy/int2");
  EXPECT_EQ(c->decode.max_batch, 8);
  EXPECT_EQ(c->decode.compute, "weight_only");
  EXPECT_EQ(c->prefill.device, "cpu");  // default
  EXPECT_EQ(c->decode.device, "cpu");
  EXPECT_EQ(c->decode.speculative, "none");  // off unless asked for
}

TEST(DeployConfig, DecodeSpeculation) {
  auto c = ParseDeployConfig("model = \"m\"\n[decode]\nspeculative = \"ngram\"\nspec_k = 6\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->decode.speculative, "ngram");
  EXPECT_EQ(c->decode.spec_k, 6);
  ExpectError("model = \"m\"\n[decode]\nspeculative = \"eagle\"\n", "speculative must be");
  // DFlash: its directory only; any device (both backends tap the target's hidden states).
  ExpectError("model = \"m\"\n[decode]\nspeculative = \"dflash\"\n", "needs draft_weights");
  ExpectError(
      "model = \"m\"\n[decode]\nspeculative = \"dflash\"\ndraft_weights = \"d\"\n"
      "draft_format = \"int4\"\n",
      "no draft_format");
  auto on_cuda = ParseDeployConfig(
      "model = \"m\"\n[prefill]\ndevice = \"cuda\"\n[decode]\nspeculative = \"dflash\"\n"
      "draft_weights = \"d\"\ndevice = \"cuda\"\n",
      "/base");
  EXPECT_TRUE(on_cuda.ok()) << on_cuda.status();
  auto dflash = ParseDeployConfig(
      "model = \"m\"\n[decode]\nspeculative = \"dflash\"\ndraft_weights = \"d\"\n", "/base");
  ASSERT_TRUE(dflash.ok()) << dflash.status();
  EXPECT_EQ(dflash->decode.speculative, "dflash");
  EXPECT_EQ(dflash->decode.draft_weights, "/base/d");
  EXPECT_TRUE(dflash->decode.draft_on_prefill);
  // The self drafter needs exactly one source of weights; they are its alone.
  ExpectError("model = \"m\"\n[decode]\nspeculative = \"self\"\n", "exactly one of draft_format");
  ExpectError("model = \"m\"\n[decode]\nspeculative = \"ngram\"\ndraft_format = \"int4\"\n",
              "set speculative = \"self\"");  // (or dflash)
  auto self = ParseDeployConfig(
      "model = \"m\"\n[decode]\nspeculative = \"self\"\ndraft_format = \"int4\"\n"
      "draft_group_size = 64\ndraft_on_prefill = false\n");
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(self->decode.draft_format, "int4");
  EXPECT_EQ(self->decode.draft_group_size, 64);
  EXPECT_FALSE(self->decode.draft_on_prefill);
  ExpectError("model = \"m\"\n[decode]\nspec_k = 0\n", "spec_k must be in [1, 16]");
  ExpectError("model = \"m\"\n[decode]\nspec_k = 17\n", "spec_k must be in [1, 16]");
  // A decode key only.
  ExpectError("model = \"m\"\n[prefill]\nspeculative = \"ngram\"\n", "unknown key");
  ExpectError("model = \"m\"\n[prefill]\nbatch_invariant = true\n", "unknown key");
  auto inv = ParseDeployConfig("model = \"m\"\n[decode]\nbatch_invariant = true\n");
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_TRUE(inv->decode.batch_invariant);
  auto plain = ParseDeployConfig("model = \"m\"\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->decode.batch_invariant);
}

TEST(DeployConfig, DecodeLmHeadFormat) {
  auto plain = ParseDeployConfig("model = \"m\"\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->decode.lm_head, "bf16");
  auto q = ParseDeployConfig("model = \"m\"\n[decode]\nlm_head = \"int4\"\n");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->decode.lm_head, "int4");
  ExpectError("model = \"m\"\n[decode]\nlm_head = \"int5\"\n",
              "[decode] lm_head format 'int5' is not one of bf16");
  ExpectError("model = \"m\"\n[prefill]\nlm_head = \"int4\"\n", "unknown key");
}

TEST(DeployConfig, CpuMatmulPerPhase) {
  auto plain = ParseDeployConfig("model = \"m\"\n");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->prefill.cpu_matmul, "q8");  // the fast path is the default
  EXPECT_EQ(plain->decode.cpu_matmul, "q8");
  auto c = ParseDeployConfig(
      "model = \"m\"\n[prefill]\ncpu_matmul = \"exact\"\n[decode]\ncpu_matmul = \"exact\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.cpu_matmul, "exact");
  EXPECT_EQ(c->decode.cpu_matmul, "exact");
  ExpectError("model = \"m\"\n[decode]\ncpu_matmul = \"int8\"\n",
              "[decode] cpu_matmul: cpu matmul 'int8' is not one of q8");
  ExpectError("model = \"m\"\n[prefill]\ncpu_matmul = \"fp32\"\n",
              "[prefill] cpu_matmul: cpu matmul 'fp32' is not one of q8");
}

TEST(DeployConfig, DevicePerPhase) {
  auto c = ParseDeployConfig(
      "model = \"m\"\n[prefill]\ndevice = \"cuda:0\"\n[decode]\ndevice = \"cuda:1\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefill.device, "cuda:0");
  EXPECT_EQ(c->decode.device, "cuda:1");
  EXPECT_TRUE(ParseDeployConfig("model = \"m\"\n[prefill]\ndevice = \"cuda\"\n[decode]\n"
                                "device = \"cuda\"\n")
                  .ok());
}

TEST(DeployConfig, ErrorsNameTheProblem) {
  ExpectError("[router]\nport = 1\n", "\"model\" is required");
  ExpectError("model = \"m\"\n[router]\nprot = 1\n", "unknown key \"prot\"");
  ExpectError("model = \"m\"\n[decoder]\nmax_batch = 1\n", "unknown table [decoder]");
  ExpectError("model = \"m\"\n[router]\nport = \"80\"\n", "\"port\" must be an integer");
  ExpectError("model = \"m\"\n[router]\nport = -1\n", "non-negative");
  ExpectError("model = \"m\"\n[transfer]\nbackend = \"rdma\"\n", "backend must be");
  ExpectError("model = \"m\"\n[decode]\nmax_batch = 0\n", "max_batch");
  ExpectError("model = \"m\"\n[prefill]\ntoken_budget = 1\n", "token_budget");
  ExpectError("model = \"m\"\nmodel = \"n\"\n", "config:2");  // parse error with position
  ExpectError("model = \"m\"\n[prefill]\ndevice = \"gpu0\"\n", "[prefill] device \"gpu0\"");
  ExpectError("model = \"m\"\n[decode]\ndevice = 1\n", "\"device\" must be a string");
  // A CPU worker and a GPU worker cannot share KV (f32 vs bf16).
  ExpectError("model = \"m\"\n[prefill]\ndevice = \"cuda:0\"\n", "both on GPUs");
  // token_budget is a prefill key only.
  ExpectError("model = \"m\"\n[decode]\ntoken_budget = 64\n", "unknown key \"token_budget\"");
}

TEST(DeployConfig, NcclNeedsTwoGpus) {
  auto c = ParseDeployConfig(
      "model = \"m\"\n[transfer]\nbackend = \"nccl\"\n[prefill]\ndevice = \"cuda:0\"\n"
      "[decode]\ndevice = \"cuda:1\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->transfer.backend, "nccl");
  ExpectError("model = \"m\"\n[transfer]\nbackend = \"nccl\"\n", "moves KV between GPUs");
  ExpectError(
      "model = \"m\"\n[transfer]\nbackend = \"nccl\"\n[prefill]\ndevice = \"cuda:1\"\n"
      "[decode]\ndevice = \"cuda:1\"\n",
      "two different GPUs");
}

TEST(DeployConfig, ShippedExamplesParse) {
  for (const char* name : {"local.toml", "disagg-nvfp4-int2.toml"}) {
    auto c = LoadDeployConfig(std::string(DQ_SOURCE_DIR) + "/deploy/" + name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_TRUE(std::filesystem::path(c->model).filename() == "SmolLM2-135M-Instruct.Q4_1.gguf");
  }
  EXPECT_EQ(LoadDeployConfig("/nonexistent.toml").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dq

namespace dq {
namespace {

// [prefix_cache]: the prefill worker's cache, and the decode worker's with its assistant_kv.
TEST(DeployConfig, PrefixCache) {
  auto off = ParseDeployConfig("model = \"m\"\n");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->prefix_cache.enabled);
  EXPECT_TRUE(off->prefix_cache.assistant_kv.empty());
  for (const char* policy : {"reuse", "reprefill"}) {
    auto on = ParseDeployConfig(absl::StrCat(
        "model = \"m\"\n[prefix_cache]\nenabled = true\nassistant_kv = \"", policy, "\"\n"));
    ASSERT_TRUE(on.ok()) << on.status();
    EXPECT_TRUE(on->prefix_cache.enabled);
    EXPECT_EQ(on->prefix_cache.assistant_kv, policy);
  }
  ExpectError("model = \"m\"\n[prefix_cache]\nassistant_kv = \"keep\"\n",
              "assistant_kv must be \"reuse\" or \"reprefill\"");
}

}  // namespace
}  // namespace dq
