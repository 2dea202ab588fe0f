// The decode worker's fallback for a DFlash drafter's prompt context (target_prompt_features.h):
// recomputing the prompt's hidden states on the side gives the drafter exactly the context the
// colocated path gives it (the capture of the target's own prefill), and leaves the target's
// KV pool (the leases' blocks) untouched.
#include "decode_worker/target_prompt_features.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/spec/dflash_checkpoint_maker.h"
#include "engine/spec/dflash_drafter.h"
#include "engine/spec/hidden_capture.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq::decode {
namespace {
namespace fs = std::filesystem;

TEST(ObservePromptOnTarget, SameContextAsTheTargetsOwnPrefill) {
  auto model = dq::testing::LoadTinyQwen3();
  ASSERT_NE(model, nullptr);
  ModelRunnerOptions ro;
  ro.threads = 2;
  ro.kv_capacity = 256;
  auto runner = ModelRunner::Create(*model->checkpoint, model->config, ro);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const fs::path dir = fs::temp_directory_path() / ("dq_tpf_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  ASSERT_TRUE(WriteRandomDFlashCheckpoint(model->config, {}, dir.string()).ok());
  DFlashDrafterOptions o;
  o.threads = 2;
  o.kv_capacity = 256;
  std::unique_ptr<Checkpoint> c1, c2;
  auto own = DFlashDrafter::Load(dir.string(), *model->checkpoint, model->config, o, &c1);
  auto side = DFlashDrafter::Load(dir.string(), *model->checkpoint, model->config, o, &c2);
  ASSERT_TRUE(own.ok() && side.ok());
  const std::vector<int32_t> ids = model->tokenizer.Encode("one two three four five six");
  const int n = static_cast<int>(ids.size());

  // The colocated path: the target's prefill in its own pool, captured.
  KvBlockPool& pool = (*runner)->kv_pool();
  HiddenCapture capture((*own)->target_layers(), model->config.num_layers,
                        model->config.hidden_size);
  KvSequence seq;
  pool.extend(seq, n);
  BatchLogits logits;
  ASSERT_TRUE((*runner)
                  ->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, &logits, capture.Hooks())
                  .ok());
  pool.release(seq);
  ASSERT_TRUE((*own)->Begin(1, ids).ok());
  (*own)->ObserveTarget(1, 0, n, capture.Rows(0, n));

  const int free_blocks = pool.num_free_blocks();
  ASSERT_TRUE(ObservePromptOnTarget(**runner, **side, 1, ids).ok());
  EXPECT_EQ(pool.num_free_blocks(), free_blocks);
  EXPECT_EQ((*side)->context_tokens(1), n);
  const int32_t anchor = ids[0];
  auto want = (*own)->BlockLogits(1, anchor, n);
  auto got = (*side)->BlockLogits(1, anchor, n);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(*got, *want);
  EXPECT_FALSE(ObservePromptOnTarget(**runner, **side, 2, {}).ok());
  (*own)->End(1);
  (*side)->End(1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dq::decode
