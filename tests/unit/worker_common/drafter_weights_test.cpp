// What identifies a DFlash drafter on the wire (docs/speculative.md, "The DFlash drafter across
// the split"): its fingerprint is equal for the same checkpoint and differs for other weights or
// another config that shapes its context K/V; its KV layout is its pool's.
#include "worker_common/drafter_weights.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/open_checkpoint.h"
#include "engine/spec/dflash_checkpoint_maker.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq::worker {
namespace {
namespace fs = std::filesystem;

class DFlashFingerprintTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = dq::testing::LoadTinyQwen3(); }
  void TearDown() override {
    for (const auto& d : dirs_) fs::remove_all(d);
  }
  std::string Make(const std::string& name, RandomDFlashOptions o) {
    const fs::path p =
        fs::temp_directory_path() / ("dq_dflash_fp_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(p);
    dirs_.push_back(p.string());
    EXPECT_TRUE(WriteRandomDFlashCheckpoint(model_->config, o, p.string()).ok());
    return p.string();
  }
  std::string Fingerprint(const std::string& dir) {
    auto config = ReadDFlashConfig(dir);
    auto checkpoint = OpenCheckpoint(dir);
    EXPECT_TRUE(config.ok() && checkpoint.ok());
    if (!config.ok() || !checkpoint.ok()) return "";
    return DFlashFingerprint(*config, **checkpoint);
  }

  std::unique_ptr<Model> model_;
  std::vector<std::string> dirs_;
};

TEST_F(DFlashFingerprintTest, SameDrafterAgreesOtherWeightsOrShapeDiffer) {
  ASSERT_NE(model_, nullptr);
  const std::string a = Fingerprint(Make("a", {}));
  EXPECT_EQ(a.rfind("dflash:", 0), 0u) << a;
  EXPECT_EQ(a.size(), std::string("dflash:").size() + 16);
  EXPECT_EQ(Fingerprint(Make("a2", {})), a);  // the same seed writes the same checkpoint
  RandomDFlashOptions seed;
  seed.seed = 2;
  EXPECT_NE(Fingerprint(Make("seed", seed)), a);
  RandomDFlashOptions layers;
  layers.target_layer_ids = {1, 0};
  EXPECT_NE(Fingerprint(Make("layers", layers)), a);
  // A config-only change (same tensors): the block size shapes the drafter's positions.
  const std::string block = Make("block", {});
  const fs::path config = fs::path(block) / "config.json";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(config));
  j["block_size"] = 4;
  if (j.contains("dflash_config")) j["dflash_config"]["block_size"] = 4;
  std::ofstream(config) << j.dump(2);
  EXPECT_NE(Fingerprint(block), a);
}

TEST(DrafterKvLayout, ABarePoolsLayout) {
  KvCacheOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.block_size = 16;
  o.num_blocks = 4;
  KvBlockPool pool(o);
  const auto staging = CreateHostKvStaging(pool);
  EXPECT_FALSE(staging->staged());
  const dqserve::v1::KvLayout l = DrafterKvLayout("dflash", pool, *staging);
  EXPECT_EQ(l.architecture(), "dflash");
  EXPECT_EQ(l.num_layers(), 3);
  EXPECT_EQ(l.num_kv_heads(), 2);
  EXPECT_EQ(l.head_dim(), 8);
  EXPECT_EQ(l.kv_dtype(), "f32");
  EXPECT_EQ(l.block_size(), 16);
}

}  // namespace
}  // namespace dq::worker
