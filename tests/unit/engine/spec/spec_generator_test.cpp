// Speculative generation is lossless: with any drafter (n-gram, an oracle that is always right,
// an adversary that is always wrong) a greedy or seeded request gives exactly the tokens plain
// decoding gives, stops cut where plain decoding cuts, and the KV pool ends as it started.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/generate/generator.h"
#include "engine/spec/ngram_drafter.h"
#include "tests/unit/engine/spec/spec_test_util.h"
#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

// Proposes a known continuation of each sequence (right: the plain output; wrong: off by one).
class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::vector<std::vector<int32_t>> prompts,
                  std::vector<std::vector<int32_t>> outputs, bool wrong, int vocab)
      : prompts_(std::move(prompts)), outputs_(std::move(outputs)), wrong_(wrong), vocab_(vocab) {}
  std::string_view name() const override { return "scripted"; }
  bool deterministic() const override { return deterministic_; }
  absl::Status CheckTarget(const ModelConfig&) const override { return absl::OkStatus(); }
  absl::Status Propose(std::span<const DraftRequest> reqs, std::span<Draft> drafts) override {
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto& out = outputs_[reqs[i].sequence];
      const size_t g = reqs[i].history.size() - prompts_[reqs[i].sequence].size();
      drafts[i].tokens.clear();
      for (size_t j = g; j < out.size() && drafts[i].tokens.size() < size_t(reqs[i].max_tokens);
           ++j) {
        drafts[i].tokens.push_back(wrong_ ? (out[j] + 1) % vocab_ : out[j]);
      }
    }
    return absl::OkStatus();
  }
  void Accept(uint64_t sequence, int accepted) override { accepts_[sequence].push_back(accepted); }

  bool deterministic_ = true;
  std::map<uint64_t, std::vector<int>> accepts_;

 private:
  std::vector<std::vector<int32_t>> prompts_, outputs_;
  bool wrong_;
  int vocab_;
};

class SpecGeneratorTest : public ::testing::Test {
 protected:
  void Load(std::unique_ptr<Model> model) {
    model_ = std::move(model);
    ASSERT_NE(model_, nullptr);
    ModelRunnerOptions o;
    o.threads = 2;
    o.kv_capacity = 2048;
    auto r = ModelRunner::Create(*model_->checkpoint, model_->config, o);
    ASSERT_TRUE(r.ok()) << r.status();
    runner_ = std::move(*r);
    free_blocks_ = runner_->kv_pool().num_free_blocks();
    eos_ = model_->config.eos_token_ids;
  }
  void SetUp() override { Load(testing::LoadTinyQwen3()); }
  void TearDown() override {
    if (runner_) EXPECT_EQ(runner_->kv_pool().num_free_blocks(), free_blocks_);
  }

  GenerationRequest Request(const std::string& text, int max_tokens, float temperature = 0) {
    return spec_test::Request(*model_, text, max_tokens, temperature);
  }

  std::vector<GenerationResult> Run(const std::vector<GenerationRequest>& reqs,
                                    Drafter* drafter = nullptr, int k = 4, bool adaptive = true) {
    GeneratorOptions go;
    go.drafter = drafter;
    go.spec.k = k;
    go.spec.adaptive = adaptive;
    Generator g(*runner_, model_->tokenizer, eos_, go);
    std::string streamed;
    auto r = g.Generate(reqs, [&](size_t i, std::string_view t) {
      if (i == 0) streamed += t;
    });
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_EQ(streamed, (*r)[0].text);
    return *r;
  }

  // Plain vs speculative with the n-gram, oracle and adversarial drafters, for each k.
  void ExpectLossless(const std::vector<GenerationRequest>& reqs, std::vector<int> ks = {1, 4, 9}) {
    const auto plain = Run(reqs);
    ASSERT_EQ(plain.size(), reqs.size());
    std::vector<std::vector<int32_t>> prompts, outputs;
    for (size_t i = 0; i < reqs.size(); ++i) {
      prompts.push_back(reqs[i].prompt);
      outputs.push_back(plain[i].tokens);
    }
    NgramDrafter ngram;
    ScriptedDrafter oracle(prompts, outputs, false, model_->config.vocab_size);
    ScriptedDrafter adversary(prompts, outputs, true, model_->config.vocab_size);
    for (Drafter* d : std::vector<Drafter*>{&ngram, &oracle, &adversary}) {
      for (int k : ks) {
        const auto spec = Run(reqs, d, k);
        ASSERT_EQ(spec.size(), reqs.size());
        for (size_t i = 0; i < reqs.size(); ++i) {
          SCOPED_TRACE(::testing::Message() << d->name() << (d == &adversary ? " (wrong)" : "")
                                            << " k=" << k << " request " << i);
          EXPECT_EQ(spec[i].tokens, plain[i].tokens);
          EXPECT_EQ(spec[i].text, plain[i].text);
          EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason);
          const SpecStats& st = spec[i].spec;
          EXPECT_EQ(st.emitted + 1, static_cast<int64_t>(plain[i].tokens.size()) +
                                        (plain[i].finish_reason == FinishReason::kStop &&
                                         reqs[i].params.stop.empty()));
          if (d == &adversary) EXPECT_EQ(st.accepted, 0);
          // The oracle is always right: only the step that ends the sequence may lose the
          // rest of its draft (a stop cuts it).
          if (d == &oracle) EXPECT_GE(st.accepted, st.drafted - k);
        }
      }
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<ModelRunner> runner_;
  int free_blocks_ = 0;
  std::vector<int32_t> eos_;
};

TEST_F(SpecGeneratorTest, GreedyIsLosslessAloneAndBatched) {
  std::vector<GenerationRequest> reqs = {Request("Hello there", 24),
                                         Request("a b c a b c a b c a b c a b c", 30),
                                         Request("1 2 3 4 5 6 7 8", 17)};
  for (const auto& r : reqs) ExpectLossless({r});
  ExpectLossless(reqs, {4});
}

TEST_F(SpecGeneratorTest, StopsCutInsideAcceptedRunsAsPlainDecodingDoes) {
  const auto free_run = Run({Request("the the the the the the", 24)});
  const auto& t = free_run[0].tokens;
  ASSERT_EQ(t.size(), 24u);
  for (size_t j : {3u, 7u, 12u}) {  // a stop token id (first occurrence of t[j])
    GenerationRequest r = Request("the the the the the the", 24);
    r.params.stop_token_ids = {t[j]};
    ExpectLossless({r});
  }
  GenerationRequest eos = Request("the the the the the the", 24);
  eos.params.ignore_eos = false;
  eos_ = {t[5]};  // the random model never says its real EOS: make one of its tokens the EOS
  ExpectLossless({eos});
  eos_ = model_->config.eos_token_ids;
  const std::string& text = free_run[0].text;
  ASSERT_GE(text.size(), 8u);
  GenerationRequest stop = Request("the the the the the the", 24);
  stop.params.stop = {text.substr(text.size() / 2, 3)};
  ExpectLossless({stop});
  for (int max_tokens : {1, 2, 5, 6}) ExpectLossless({Request("x y x y x y x y", max_tokens)});
}

TEST_F(SpecGeneratorTest, SeededSamplingAndPenaltiesAreLossless) {
  for (uint64_t seed : {1u, 2u, 3u, 42u}) {
    GenerationRequest r = Request("a b c a b c a b c a b c", 24, 0.8f);
    r.params.seed = seed;
    r.params.top_k = 20;
    r.params.top_p = 0.95f;
    ExpectLossless({r}, {4});
  }
  GenerationRequest pen = Request("a b c a b c a b c a b c", 24);
  pen.params.repetition_penalty = 1.3f;
  pen.params.presence_penalty = 0.5f;
  ExpectLossless({pen}, {4});
}

TEST_F(SpecGeneratorTest, OracleDraftsAreAcceptedAndRolledBackDraftsFreeTheirBlocks) {
  const std::vector<GenerationRequest> reqs = {Request("Hello there", 40)};
  const auto plain = Run(reqs);
  ScriptedDrafter oracle({reqs[0].prompt}, {plain[0].tokens}, false, model_->config.vocab_size);
  const auto spec = Run(reqs, &oracle, 8, /*adaptive=*/false);
  EXPECT_EQ(spec[0].tokens, plain[0].tokens);
  // 39 tokens after the first, 9 per step (8 drafted + 1): 5 steps, all drafts kept.
  EXPECT_EQ(spec[0].spec.steps, 5);
  EXPECT_EQ(spec[0].spec.accepted, spec[0].spec.drafted);
  EXPECT_DOUBLE_EQ(spec[0].spec.acceptance_rate(), 1.0);
  ScriptedDrafter adversary({reqs[0].prompt}, {plain[0].tokens}, true, model_->config.vocab_size);
  const auto wrong = Run(reqs, &adversary, 16, /*adaptive=*/false);
  EXPECT_EQ(wrong[0].tokens, plain[0].tokens);
  EXPECT_EQ(wrong[0].spec.accepted, 0);
  EXPECT_EQ(wrong[0].spec.steps, 39);
  // TearDown checks the pool is back to its starting free count.
}

TEST_F(SpecGeneratorTest, BadSpeculationSetupFailsBeforeAnyWork) {
  const std::vector<GenerationRequest> reqs = {Request("Hello", 4)};
  NgramDrafter ngram;
  for (int k : {0, 17}) {
    GeneratorOptions go;
    go.drafter = &ngram;
    go.spec.k = k;
    Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids, go);
    const absl::Status s = g.Generate(reqs).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  ScriptedDrafter with_distribution({}, {}, false, 1);
  with_distribution.deterministic_ = false;
  GeneratorOptions go;
  go.drafter = &with_distribution;
  Generator g(*runner_, model_->tokenizer, model_->config.eos_token_ids, go);
  EXPECT_EQ(g.Generate(reqs).status().code(), absl::StatusCode::kUnimplemented);
}

class SmolLM2SpecTest : public SpecGeneratorTest {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(testing::SmolLM2Path())) GTEST_SKIP() << "no SmolLM2 file";
    auto m = LoadModel(testing::SmolLM2Path());
    ASSERT_TRUE(m.ok()) << m.status();
    Load(std::move(*m));
  }
};

TEST_F(SmolLM2SpecTest, GreedyIsLosslessOnTheRealModel) {
  std::vector<GenerationRequest> reqs = {
      Request("The capital of France is", 24),
      Request("Repeat after me: one two three, one two three, one two three,", 32),
      Request("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", 32)};
  reqs[0].params.ignore_eos = false;
  for (const auto& r : reqs) ExpectLossless({r}, {4, 9});
}

}  // namespace
}  // namespace dq
