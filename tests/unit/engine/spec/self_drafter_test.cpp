// The self-drafter: the target's architecture on lower-bit weights with its own KV pool.
// Generation with it is lossless (greedy and seeded sampling give plain decoding's tokens, on the
// tiny Qwen3 and on SmolLM2), a drafter on the target's own weights is accepted almost always,
// its KV cache rolls back and catches up to exactly what a fresh drafter computes, and bad
// setups (other vocabulary, no or two weight sources, an already quantized base) fail up front.
#include "engine/spec/self_drafter.h"

#include <gtest/gtest.h>

#include "engine/generate/generator.h"
#include "engine/spec/draft_model.h"
#include "tests/unit/engine/spec/spec_test_util.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

constexpr int kKvCapacity = 2048;

std::unique_ptr<SelfDrafter> MakeDrafter(const Model& weights) {
  SelfDrafterOptions o;
  o.threads = 2;
  o.kv_capacity = kKvCapacity;
  auto d = SelfDrafter::Create(*weights.checkpoint, weights.config, o);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

std::unique_ptr<Model> Quantized(const Model& base, const std::string& format, int group = 32) {
  DraftModelOptions o;
  o.format = format;
  o.group_size = group;
  o.threads = 2;
  auto m = LoadDraftModel(base, o);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

class SelfDrafterTest : public ::testing::Test {
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
    if (runner_) {
      EXPECT_EQ(runner_->kv_pool().num_free_blocks(), free_blocks_);
    }
  }

  GenerationRequest Request(const std::string& text, int max_tokens, float temperature = 0) {
    return spec_test::Request(*model_, text, max_tokens, temperature);
  }
  absl::StatusOr<std::vector<GenerationResult>> TryRun(const std::vector<GenerationRequest>& reqs,
                                                       Drafter* drafter, int k = 4) {
    return spec_test::TryRun(*runner_, *model_, reqs, drafter, k);
  }
  std::vector<GenerationResult> Run(const std::vector<GenerationRequest>& reqs,
                                    Drafter* drafter = nullptr, int k = 4) {
    return spec_test::Run(*runner_, *model_, reqs, drafter, k);
  }

  // Plain vs speculative with `drafter` for each k: same tokens, text and finish; the drafter's
  // pool ends empty. Returns the speculative runs' counters summed.
  SpecStats ExpectLossless(const std::vector<GenerationRequest>& reqs, SelfDrafter& drafter,
                           std::vector<int> ks = {1, 4, 9}) {
    const auto plain = Run(reqs);
    const int drafter_free = drafter.kv_pool().num_free_blocks();
    SpecStats total;
    for (int k : ks) {
      const auto spec = Run(reqs, &drafter, k);
      EXPECT_EQ(spec.size(), reqs.size());
      if (spec.size() != reqs.size() || plain.size() != reqs.size()) return total;
      for (size_t i = 0; i < reqs.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << "k=" << k << " request " << i);
        EXPECT_EQ(spec[i].tokens, plain[i].tokens);
        EXPECT_EQ(spec[i].text, plain[i].text);
        EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason);
        total.steps += spec[i].spec.steps;
        total.drafted += spec[i].spec.drafted;
        total.accepted += spec[i].spec.accepted;
        total.emitted += spec[i].spec.emitted;
      }
      EXPECT_EQ(drafter.kv_pool().num_free_blocks(), drafter_free);
    }
    return total;
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  int free_blocks_ = 0;
};

TEST_F(SelfDrafterTest, GreedyIsLosslessWithInt2AndLut2Drafters) {
  const std::vector<GenerationRequest> reqs = {Request("Hello there", 24),
                                               Request("a b c a b c a b c a b c", 30),
                                               Request("1 2 3 4 5 6 7 8", 17)};
  for (const char* format : {"int2", "lut2"}) {
    SCOPED_TRACE(format);
    auto weights = Quantized(*model_, format);
    ASSERT_NE(weights, nullptr);
    auto drafter = MakeDrafter(*weights);
    ASSERT_NE(drafter, nullptr);
    for (const auto& r : reqs) ExpectLossless({r}, *drafter);
    const SpecStats batched = ExpectLossless(reqs, *drafter, {4});
    EXPECT_GT(batched.drafted, 0);
  }
}

TEST_F(SelfDrafterTest, DrafterOnTheTargetsOwnWeightsIsAcceptedThroughout) {
  const std::vector<GenerationRequest> reqs = {Request("Hello there", 40),
                                               Request("1 2 3 4 5 6 7 8", 33)};
  auto same = Quantized(*model_, "bf16");  // the tiny model is bf16: the same weights
  ASSERT_NE(same, nullptr);
  auto drafter = MakeDrafter(*same);
  ASSERT_NE(drafter, nullptr);
  const SpecStats st = ExpectLossless(reqs, *drafter, {4, 8});
  ASSERT_GT(st.drafted, 0);
  // Only where a request ends may a draft be cut short (max_tokens bounds the last one, so even
  // that one is kept): every drafted token is accepted.
  EXPECT_EQ(st.accepted, st.drafted);
  // A worse drafter (int2 of a random model) is accepted far less often.
  auto int2 = Quantized(*model_, "int2", 32);
  ASSERT_NE(int2, nullptr);
  auto bad = MakeDrafter(*int2);
  const SpecStats worse = ExpectLossless(reqs, *bad, {4, 8});
  EXPECT_LT(worse.acceptance_rate(), 0.9 * st.acceptance_rate());
}

TEST_F(SelfDrafterTest, SeededSamplingPenaltiesAndStopsAreLossless) {
  auto weights = Quantized(*model_, "int4");
  ASSERT_NE(weights, nullptr);
  auto drafter = MakeDrafter(*weights);
  ASSERT_NE(drafter, nullptr);
  for (uint64_t seed : {1u, 2u, 42u}) {
    GenerationRequest r = Request("a b c a b c a b c a b c", 24, 0.8f);
    r.params.seed = seed;
    r.params.top_k = 20;
    r.params.top_p = 0.95f;
    ExpectLossless({r}, *drafter, {4});
  }
  GenerationRequest pen = Request("a b c a b c a b c a b c", 24);
  pen.params.repetition_penalty = 1.3f;
  pen.params.presence_penalty = 0.5f;
  ExpectLossless({pen}, *drafter, {4});
  const auto free_run = Run({Request("the the the the the the", 24)});
  ASSERT_EQ(free_run.size(), 1u);
  GenerationRequest stop = Request("the the the the the the", 24);
  stop.params.stop_token_ids = {free_run[0].tokens[9]};
  ExpectLossless({stop}, *drafter, {4, 9});
  for (int max_tokens : {1, 2, 5}) ExpectLossless({Request("x y x y", max_tokens)}, *drafter);
}

TEST_F(SelfDrafterTest, RollbackAndCatchUpMatchAFreshDrafter) {
  auto weights = Quantized(*model_, "int4");
  ASSERT_NE(weights, nullptr);
  auto drafter = MakeDrafter(*weights);
  ASSERT_NE(drafter, nullptr);
  const int free0 = drafter->kv_pool().num_free_blocks();
  std::vector<int32_t> history = model_->tokenizer.Encode("one two three four five six");
  ASSERT_TRUE(drafter->Begin(7, history).ok());
  history.push_back(5);  // the target's first token
  std::vector<Draft> draft(1);
  DraftRequest req{7, history, 12};
  ASSERT_TRUE(drafter->Propose(std::span(&req, 1), draft).ok());
  ASSERT_EQ(draft[0].tokens.size(), 12u);
  EXPECT_TRUE(draft[0].probs.empty());
  // It holds the history and every draft token but the last (never fed).
  std::vector<int32_t> expect = history;
  expect.insert(expect.end(), draft[0].tokens.begin(), draft[0].tokens.end() - 1);
  auto cached = drafter->cached_tokens(7);
  EXPECT_EQ(std::vector<int32_t>(cached.begin(), cached.end()), expect);
  // The target keeps 2 drafted tokens and then emits its own (differing) token.
  drafter->Accept(7, 2);
  cached = drafter->cached_tokens(7);
  EXPECT_EQ(cached.size(), history.size() + 2);
  EXPECT_EQ(drafter->kv_pool().num_free_blocks(),
            free0 - drafter->kv_pool().BlocksFor(static_cast<int>(cached.size())));
  history.insert(history.end(), draft[0].tokens.begin(), draft[0].tokens.begin() + 2);
  history.push_back((draft[0].tokens[2] + 1) % model_->config.vocab_size);
  req = {7, history, 6};
  ASSERT_TRUE(drafter->Propose(std::span(&req, 1), draft).ok());
  // A drafter that never saw the rejected tokens proposes the same continuation.
  auto fresh = MakeDrafter(*weights);
  ASSERT_NE(fresh, nullptr);
  std::vector<Draft> fresh_draft(1);
  ASSERT_TRUE(fresh->Propose(std::span(&req, 1), fresh_draft).ok());
  EXPECT_EQ(draft[0].tokens, fresh_draft[0].tokens);
  // Without an Accept the history is still checked: the draft tokens it lacks are rolled back.
  std::vector<int32_t> other = history;
  other.push_back(draft[0].tokens[0]);
  other.push_back((draft[0].tokens[1] + 3) % model_->config.vocab_size);
  other.push_back(draft[0].tokens[2]);
  req = {7, other, 5};
  ASSERT_TRUE(drafter->Propose(std::span(&req, 1), draft).ok());
  ASSERT_TRUE(fresh->Propose(std::span(&req, 1), fresh_draft).ok());
  EXPECT_EQ(draft[0].tokens, fresh_draft[0].tokens);
  cached = drafter->cached_tokens(7);
  EXPECT_TRUE(std::equal(other.begin(), other.end(), cached.begin()));
  req = {7, history, 6};
  ASSERT_TRUE(drafter->Propose(std::span(&req, 1), draft).ok());
  // Rejecting everything keeps exactly the history; End frees every block.
  drafter->Accept(7, 0);
  EXPECT_EQ(drafter->cached_tokens(7).size(), history.size());
  drafter->End(7);
  EXPECT_EQ(drafter->kv_pool().num_free_blocks(), free0);
  EXPECT_TRUE(drafter->cached_tokens(7).empty());
}

TEST_F(SelfDrafterTest, ADrafterWithoutKvRoomDraftsNothingAndStaysLossless) {
  auto same = Quantized(*model_, "bf16");  // always right, so each drafting step drafts k
  ASSERT_NE(same, nullptr);
  SelfDrafterOptions o;
  o.threads = 2;
  o.kv_capacity = 32;  // two blocks: the start of the generation fits, the rest does not
  auto small = SelfDrafter::Create(*same->checkpoint, same->config, o);
  ASSERT_TRUE(small.ok()) << small.status();
  const GenerationRequest r = Request("a b c a b", 40);
  const int prompt = static_cast<int>(r.prompt.size());
  ASSERT_LT(prompt, 20);
  const SpecStats st = ExpectLossless({r}, **small, {4});
  EXPECT_GT(st.drafted, 0);  // while the KV had room
  EXPECT_EQ(st.accepted, st.drafted);
  // Drafting needs history + 3 <= 32 tokens; every step after that emits one token alone.
  const int64_t undrafted_steps = st.steps - st.drafted / 4;
  EXPECT_GE(undrafted_steps, prompt + 40 - 32 - 4);
}

TEST_F(SelfDrafterTest, BadSetupsFailBeforeAnyWork) {
  DraftModelOptions neither, both;
  both.format = "int2";
  both.weights = testing::TinyQwen3Path();
  for (const DraftModelOptions& o : {neither, both}) {
    const absl::Status s = LoadDraftModel(*model_, o).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("--draft-format"), std::string::npos) << s;
  }
  DraftModelOptions unknown;
  unknown.format = "int5";
  const absl::Status u = LoadDraftModel(*model_, unknown).status();
  EXPECT_FALSE(u.ok());
  EXPECT_NE(u.message().find("int2"), std::string::npos) << u;  // lists the known formats
  auto int2 = Quantized(*model_, "int2");
  ASSERT_NE(int2, nullptr);
  DraftModelOptions again;
  again.format = "int2";
  const absl::Status q = LoadDraftModel(*int2, again).status();
  EXPECT_NE(q.message().find("already quantized"), std::string::npos) << q;
  // A target with another vocabulary: the drafter refuses it, so does the generator.
  auto drafter = MakeDrafter(*int2);
  ASSERT_NE(drafter, nullptr);
  ModelConfig other = model_->config;
  other.vocab_size += 1;
  const absl::Status v = drafter->CheckTarget(other);
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("vocabulary"), std::string::npos) << v;
  EXPECT_TRUE(drafter->CheckTarget(model_->config).ok());
  for (int k : {0, 17}) {
    EXPECT_EQ(TryRun({Request("Hello", 4)}, drafter.get(), k).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  if (std::filesystem::exists(testing::SmolLM2Path())) {
    auto smol = LoadModel(testing::SmolLM2Path());
    ASSERT_TRUE(smol.ok()) << smol.status();
    const absl::Status t = CheckSameVocabulary(*model_, **smol);
    EXPECT_EQ(t.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.message().find("tokenizer"), std::string::npos) << t;
    auto smol_drafter = MakeDrafter(**smol);
    ASSERT_NE(smol_drafter, nullptr);
    EXPECT_EQ(TryRun({Request("Hello", 4)}, smol_drafter.get()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

class SmolLM2SelfDrafterTest : public SelfDrafterTest {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::SmolLM2Path())) GTEST_SKIP() << "no SmolLM2 file";
    auto m = LoadModel(testing::SmolLM2Path());
    ASSERT_TRUE(m.ok()) << m.status();
    Load(std::move(*m));
  }
};

TEST_F(SmolLM2SelfDrafterTest, GreedyIsLosslessOnTheRealModel) {
  std::vector<GenerationRequest> reqs = {
      Request("The capital of France is", 24),
      Request("Repeat after me: one two three, one two three, one two three,", 32),
      Request("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", 32)};
  reqs[0].params.ignore_eos = false;
  auto int2 = Quantized(*model_, "int2", 64);
  ASSERT_NE(int2, nullptr);
  auto drafter = MakeDrafter(*int2);
  ASSERT_NE(drafter, nullptr);
  const SpecStats st = ExpectLossless(reqs, *drafter, {4});
  EXPECT_GT(st.accepted, 0);
  // The target's own file as the drafter: the same numbers, so (nearly) every draft is kept.
  auto same = MakeDrafter(*model_);
  ASSERT_NE(same, nullptr);
  const SpecStats all = ExpectLossless(reqs, *same, {4});
  EXPECT_GE(all.acceptance_rate(), 0.95);
  EXPECT_GT(all.acceptance_rate(), st.acceptance_rate());
}

}  // namespace
}  // namespace dq
