// The DFlash block-diffusion drafter on random-weight checkpoints in the published layout
// (written by WriteRandomDFlashCheckpoint for each target): it loads, drafts whole blocks and
// goes through the generator's verify path losslessly (greedy and seeded, on the tiny Qwen3 and
// on SmolLM2), its context cache built step by step equals one built at once, and bad setups
// (vocabulary, hidden size, layer ids, layer count, missing tensor, mask token, k past the
// block, unsupported variants) fail before any token with an error that names the mismatch.
#include "engine/spec/dflash_drafter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/generate/generator.h"
#include "engine/spec/dflash_checkpoint_maker.h"
#include "engine/spec/hidden_capture.h"
#include "tests/unit/engine/spec/spec_test_util.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

namespace fs = std::filesystem;

constexpr int kKvCapacity = 2048;

std::string TempDir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("dq_dflash_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  return p.string();
}

// Rewrites `dir`/config.json through `edit`.
void EditConfig(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path p = fs::path(dir) / "config.json";
  std::ifstream in(p);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  edit(j);
  std::ofstream(p) << j.dump(2);
}

class DFlashDrafterTest : public ::testing::Test {
 protected:
  void Load(std::unique_ptr<Model> model) {
    model_ = std::move(model);
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = kKvCapacity;
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
    free_blocks_ = runner_->kv_pool().num_free_blocks();
  }
  void SetUp() override { Load(testing::LoadTinyQwen3()); }
  void TearDown() override {
    if (runner_) EXPECT_EQ(runner_->kv_pool().num_free_blocks(), free_blocks_);
    for (const auto& d : dirs_) fs::remove_all(d);
  }

  std::string Make(const std::string& name, RandomDFlashOptions o = {}) {
    const std::string dir = TempDir(name);
    dirs_.push_back(dir);
    EXPECT_TRUE(WriteRandomDFlashCheckpoint(model_->config, o, dir).ok());
    return dir;
  }
  absl::StatusOr<std::unique_ptr<DFlashDrafter>> TryOpen(const std::string& dir) {
    DFlashDrafterOptions o;
    o.threads = 2;
    o.kv_capacity = kKvCapacity;
    checkpoints_.emplace_back();
    return DFlashDrafter::Load(dir, *model_->checkpoint, model_->config, o, &checkpoints_.back());
  }
  std::unique_ptr<DFlashDrafter> Open(const std::string& dir) {
    auto d = TryOpen(dir);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }

  GenerationRequest Request(const std::string& text, int max_tokens, float temperature = 0) {
    return spec_test::Request(*model_, text, max_tokens, temperature, /*seed=*/7);
  }
  absl::StatusOr<std::vector<GenerationResult>> TryRun(const std::vector<GenerationRequest>& reqs,
                                                       Drafter* drafter, int k = 4) {
    return spec_test::TryRun(*runner_, *model_, reqs, drafter, k);
  }
  std::vector<GenerationResult> Run(const std::vector<GenerationRequest>& reqs,
                                    Drafter* drafter = nullptr, int k = 4) {
    return spec_test::Run(*runner_, *model_, reqs, drafter, k);
  }

  // Plain vs speculative for each k: same tokens, text and finish reason; every step drafted
  // (the drafter always has its context); the drafter's pool ends as it began.
  void ExpectLossless(const std::vector<GenerationRequest>& reqs, DFlashDrafter& drafter,
                      std::vector<int> ks) {
    const auto plain = Run(reqs);
    const int drafter_free = drafter.kv_pool().num_free_blocks();
    for (int k : ks) {
      const auto spec = Run(reqs, &drafter, k);
      ASSERT_EQ(spec.size(), reqs.size());
      ASSERT_EQ(plain.size(), reqs.size());
      for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "k=" << k << " request " << i);
        EXPECT_EQ(spec[i].tokens, plain[i].tokens);
        EXPECT_EQ(spec[i].text, plain[i].text);
        EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason);
        EXPECT_GT(spec[i].spec.steps, 0);
        // Each step but possibly the last drafts (the budget shrinks only near max_tokens).
        EXPECT_GE(spec[i].spec.drafted, spec[i].spec.steps - 1);
      }
      EXPECT_EQ(drafter.kv_pool().num_free_blocks(), drafter_free);
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  int free_blocks_ = 0;
  std::vector<std::string> dirs_;
  std::vector<std::unique_ptr<Checkpoint>> checkpoints_;
};

TEST_F(DFlashDrafterTest, LoadsThePublishedLayout) {
  RandomDFlashOptions o;
  o.layers = 2;
  o.block_size = 6;
  o.target_layer_ids = {1, 0};
  auto d = Open(Make("layout", o));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->name(), "dflash");
  EXPECT_TRUE(d->deterministic());
  EXPECT_EQ(d->max_draft_tokens(), 5);
  EXPECT_EQ(std::vector<int>(d->target_layers().begin(), d->target_layers().end()),
            (std::vector<int>{1, 0}));
  EXPECT_EQ(d->config().layers.num_layers, 2);
  EXPECT_EQ(d->config().mask_token_id, model_->config.vocab_size - 1);
  EXPECT_TRUE(d->CheckTarget(model_->config).ok());
}

TEST_F(DFlashDrafterTest, GreedyAndSeededAreLosslessOnTinyQwen3) {
  auto d = Open(Make("tiny"));  // block 8, target layers {0, 1} (1 is the last: final-normed)
  ASSERT_NE(d, nullptr);
  const std::vector<GenerationRequest> greedy = {
      Request("Hello there", 24), Request("a b c a b c a b c", 30), Request("1 2 3 4 5 6 7 8", 17)};
  ExpectLossless(greedy, *d, {1, 4, 7});
  const std::vector<GenerationRequest> seeded = {Request("Hello there", 20, 0.8f),
                                                 Request("The cat", 16, 1.2f)};
  ExpectLossless(seeded, *d, {3});
}

TEST_F(DFlashDrafterTest, GreedyIsLosslessOnSmolLM2) {
  Load(LoadModel(testing::SmolLM2Path()).value());
  RandomDFlashOptions o;
  o.intermediate = 256;  // keep the random drafter cheap; its width is free
  auto d = Open(Make("smollm2", o));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(std::vector<int>(d->target_layers().begin(), d->target_layers().end()),
            (std::vector<int>{0, 15, 29}));
  ExpectLossless({Request("The capital of France is", 12)}, *d, {4});
}

// The context cache, grown by ObserveTarget + BlockLogits step by step, gives the logits a fresh
// drafter computes from the whole context at once; and a block depends on its context.
TEST_F(DFlashDrafterTest, IncrementalContextMatchesFreshContext) {
  const std::string dir = Make("cache");
  auto grown = Open(dir);
  auto fresh = Open(dir);
  ASSERT_NE(grown, nullptr);
  ASSERT_NE(fresh, nullptr);
  const std::vector<int32_t> ids = model_->tokenizer.Encode("one two three four five six seven");
  const int n = static_cast<int>(ids.size());
  ASSERT_GE(n, 7);
  HiddenCapture capture(grown->target_layers(), model_->config.num_layers,
                        model_->config.hidden_size);
  KvSequence seq;
  runner_->kv_pool().extend(seq, n);
  BatchLogits logits;
  ASSERT_TRUE(
      runner_->Forward(Batch{Phase::kPrefill, {{&seq, ids, false}}}, &logits, capture.Hooks())
          .ok());
  runner_->kv_pool().release(seq);
  ASSERT_TRUE(grown->Begin(1, ids).ok());
  for (int end : {2, 3, 5}) {  // observe in pieces, drafting between them
    const int from = grown->context_tokens(1);
    grown->ObserveTarget(1, from, end - from, capture.Rows(from, end - from));
    ASSERT_TRUE(grown->BlockLogits(1, ids[end], end).ok());
  }
  grown->ObserveTarget(1, 5, n - 1 - 5, capture.Rows(5, n - 1 - 5));
  auto a = grown->BlockLogits(1, ids[n - 1], n - 1);
  ASSERT_TRUE(fresh->Begin(2, ids).ok());
  fresh->ObserveTarget(2, 0, n - 1, capture.Rows(0, n - 1));
  auto b = fresh->BlockLogits(2, ids[n - 1], n - 1);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) ASSERT_NEAR((*a)[i], (*b)[i], 1e-4f) << i;
  // Another context, same anchor: other logits.
  auto other = Open(dir);
  ASSERT_TRUE(other->Begin(3, ids).ok());
  other->ObserveTarget(3, 0, n - 1, capture.Rows(1, n - 1));
  auto c = other->BlockLogits(3, ids[n - 1], n - 1);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *b);
  // A gap in the observed positions stops drafting instead of drafting from a wrong context.
  other->ObserveTarget(3, n + 3, 1, capture.Rows(0, 1));
  EXPECT_FALSE(other->BlockLogits(3, ids[0], n + 4).ok());
  for (auto* d : {grown.get(), fresh.get(), other.get()}) {
    d->End(1), d->End(2), d->End(3);
    EXPECT_EQ(d->kv_pool().num_free_blocks(), d->kv_pool().options().num_blocks);
  }
}

// The context K/V written where the target's prefill ran (WriteContext, in chunks, on another
// drafter instance) and landed into a fresh drafter (BeginWithContext) drafts exactly what the
// drafter computes from ObserveTarget itself: what a prefill worker ships is the drafter's own.
TEST_F(DFlashDrafterTest, ShippedContextMatchesObservedContext) {
  const std::string dir = Make("shipped");
  auto own = Open(dir);
  auto writer = Open(dir);
  auto receiver = Open(dir);
  ASSERT_TRUE(own && writer && receiver);
  const std::vector<int32_t> ids = model_->tokenizer.Encode("one two three four five six seven");
  const int n = static_cast<int>(ids.size()) - 1;  // the context; ids[n] is the anchor
  ASSERT_GE(n, 5);
  HiddenCapture capture(own->target_layers(), model_->config.num_layers,
                        model_->config.hidden_size);
  KvSequence seq;
  runner_->kv_pool().extend(seq, n);
  BatchLogits logits;
  ASSERT_TRUE(runner_
                  ->Forward(Batch{Phase::kPrefill, {{&seq, std::span(ids).first(n), false}}},
                            &logits, capture.Hooks())
                  .ok());
  runner_->kv_pool().release(seq);
  ASSERT_TRUE(own->Begin(1, ids).ok());
  own->ObserveTarget(1, 0, n, capture.Rows(0, n));
  auto want = own->BlockLogits(1, ids[n], n);
  ASSERT_TRUE(want.ok()) << want.status();

  KvBlockPool& wpool = writer->kv_pool();
  KvSequence shipped;
  wpool.extend(shipped, n);
  int layers_written = 0;
  for (auto [first, count] : {std::pair{0, 3}, std::pair{3, n - 3}}) {
    const DFlashDrafter::ContextChunk chunk{&shipped, first, capture.Rows(first, count)};
    ASSERT_TRUE(writer->WriteContext({&chunk, 1}, [&](int) { ++layers_written; }).ok());
  }
  EXPECT_EQ(layers_written, 2 * writer->config().layers.num_layers);
  EXPECT_EQ(shipped.num_tokens, n);
  const int bs = wpool.block_size();
  auto land = [&](const KvSequence& into) {
    for (int l = 0; l < writer->config().layers.num_layers; ++l) {
      for (int p = 0; p < n; ++p) {
        const int64_t kv = writer->config().layers.kv_dim();
        std::copy_n(wpool.key(l, shipped.blocks[p / bs], p % bs), kv,
                    receiver->kv_pool().key(l, into.blocks[p / bs], p % bs));
        std::copy_n(wpool.value(l, shipped.blocks[p / bs], p % bs), kv,
                    receiver->kv_pool().value(l, into.blocks[p / bs], p % bs));
      }
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE(receiver->BeginWithContext(2, n, land).ok());
  EXPECT_EQ(receiver->context_tokens(2), n);
  auto got = receiver->BlockLogits(2, ids[n], n);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) ASSERT_NEAR((*got)[i], (*want)[i], 1e-5f) << i;
  // A failed landing leaves the sequence unknown and its blocks free.
  const int free_before = receiver->kv_pool().num_free_blocks();
  EXPECT_FALSE(
      receiver->BeginWithContext(3, n, [](const KvSequence&) { return absl::DataLossError("x"); })
          .ok());
  EXPECT_EQ(receiver->kv_pool().num_free_blocks(), free_before);
  EXPECT_EQ(receiver->context_tokens(3), 0);
  // Features of the wrong width are refused.
  const std::vector<float> bad(7, 0.f);
  const DFlashDrafter::ContextChunk wrong{&shipped, 0, bad};
  EXPECT_FALSE(writer->WriteContext({&wrong, 1}, {}).ok());
  wpool.release(shipped);
  own->End(1);
  receiver->End(2);
}

TEST_F(DFlashDrafterTest, MismatchedConfigurationFailsAtStartUp) {
  const std::string good = Make("good");
  auto expect_error = [&](const std::function<void(nlohmann::json&)>& edit,
                          const std::string& needle, absl::StatusCode code) {
    const std::string dir = Make("bad");
    EditConfig(dir, edit);
    auto d = TryOpen(dir);
    ASSERT_FALSE(d.ok()) << needle;
    EXPECT_EQ(d.status().code(), code) << d.status();
    EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status();
    fs::remove_all(dir);
  };
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  expect_error([](auto& j) { j["vocab_size"] = 1000; }, "vocabulary has 1000 tokens", bad);
  expect_error([](auto& j) { j["dflash_config"]["target_layer_ids"] = {0, 5}; }, "layer 5", bad);
  expect_error([](auto& j) { j["num_target_layers"] = 36; }, "target of 36 layers", bad);
  expect_error([](auto& j) { j["dflash_config"]["mask_token_id"] = 1 << 30; }, "mask token", bad);
  expect_error([](auto& j) { j["dflash_config"].erase("mask_token_id"); }, "'mask_token_id'", bad);
  expect_error([](auto& j) { j["dflash_config"].erase("target_layer_ids"); }, "target_layer_ids",
               bad);
  expect_error([](auto& j) { j["block_size"] = 1; }, "block_size", bad);
  expect_error([](auto& j) { j["num_hidden_layers"] = 2; }, "layers.1.",
               absl::StatusCode::kNotFound);
  expect_error([](auto& j) { j["intermediate_size"] = 100; }, "mlp.gate_proj.weight' has shape",
               bad);
  const absl::StatusCode unimpl = absl::StatusCode::kUnimplemented;
  expect_error([](auto& j) { j["layer_types"] = {"sliding_attention"}; }, "sliding", unimpl);
  expect_error([](auto& j) { j["architectures"] = {"DFlash2DraftModel"}; }, "DFlash2", unimpl);
  expect_error([](auto& j) { j["dflash_config"]["output_multiplier"] = 0.2; }, "output_multiplier",
               unimpl);
  // A drafter made for another target (SmolLM2: hidden 576) does not fit the tiny Qwen3.
  auto smol = LoadModel(testing::SmolLM2Path());
  ASSERT_TRUE(smol.ok());
  const std::string other = TempDir("other");
  dirs_.push_back(other);
  ASSERT_TRUE(WriteRandomDFlashCheckpoint((*smol)->config, {}, other).ok());
  auto d = TryOpen(other);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("hidden size is 576"), std::string::npos) << d.status();
  // k past the block: the generator refuses before any token.
  auto drafter = Open(good);
  ASSERT_NE(drafter, nullptr);
  auto r = TryRun({Request("Hello", 4)}, drafter.get(), 8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), bad);
  EXPECT_NE(r.status().message().find("--spec-k 8 is more than the dflash drafter drafts in one "
                                      "step (7)"),
            std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace dq
