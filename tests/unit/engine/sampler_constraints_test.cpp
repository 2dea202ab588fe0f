// Sampler::ApplyConstraints and what it does to sampling: logit_bias against a reference
// addition, +100 forcing and -100 banning a token, min_tokens holding back EOS and stop ids,
// a grammar making random sampling write valid JSON of its schema, and Validate()'s errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/token_vocabulary.h"
#include "engine/sampler/sampler.h"
#include "tests/unit/engine/json_schema_testing.h"
#include "tests/unit/engine/qwen_test_tokenizer.h"

namespace dq {
namespace {

using grammar::testing::FreshSeed;
using grammar::testing::Generator;
using grammar::testing::Json;

std::vector<float> RandomLogits(std::mt19937_64& rng, size_t n, float scale = 3.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = d(rng);
  return l;
}

TEST(SamplerConstraints, LogitBiasIsAddedToTheRawLogits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int round = 0; round < 50; ++round) {
    SamplingParams p;
    std::uniform_int_distribution<int32_t> id(0, 499);
    std::uniform_real_distribution<float> bias(-100.0f, 100.0f);
    std::vector<float> expected = RandomLogits(rng, 500);
    const std::vector<float> raw = expected;
    for (int k = 0; k < 20; ++k) {
      const int32_t t = id(rng);
      bool seen = false;
      for (const auto& [tt, b] : p.logit_bias) seen = seen || tt == t;
      if (seen) continue;  // one bias per id, as the API's map has
      p.logit_bias.push_back({t, bias(rng)});
      expected[static_cast<size_t>(t)] += p.logit_bias.back().second;
    }
    ASSERT_TRUE(Validate(p, 500).ok());
    Sampler s(p);
    std::vector<float> got = raw;
    s.ApplyConstraints(got);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], expected[i]) << "id " << i;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(SamplerConstraints, PlusHundredForcesAndMinusHundredBansUnderGreedyAndSampling) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int draws = 0;
  for (int round = 0; round < 200; ++round) {
    const std::vector<float> logits = RandomLogits(rng, 2000);
    const int32_t forced = static_cast<int32_t>(rng() % 2000);
    int32_t top = 0;
    for (int32_t i = 0; i < 2000; ++i) top = logits[i] > logits[top] ? i : top;
    SamplingParams p;
    p.temperature = round % 4 == 0 ? 0.0f : 1.0f + 0.9f * static_cast<float>(round % 3) / 2;
    p.top_p = round % 5 == 1 ? 0.8f : 1.0f;
    p.top_k = round % 7 == 2 ? 40 : 0;
    p.seed = rng();
    p.logit_bias = {{forced, 100.0f}};
    Sampler force(p);
    p.logit_bias = {{top, -100.0f}};
    Sampler ban(p);
    for (int k = 0; k < 5; ++k) {
      std::vector<float> a = logits, b = logits;
      ASSERT_EQ(force.Sample(a), forced) << "temperature " << p.temperature;
      if (p.temperature == 0.0f) {
        EXPECT_NE(ban.Sample(b), top);
      }
      ++draws;
    }
  }
  EXPECT_GT(draws, 0);
}

TEST(SamplerConstraints, MinTokensMasksEosAndStopIdsUntilReached) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const float inf = std::numeric_limits<float>::infinity();
  int steps = 0;
  for (int round = 0; round < 40; ++round) {
    SamplingParams p;
    p.temperature = round % 2 == 0 ? 0.0f : 1.0f;
    p.seed = rng();
    p.max_tokens = 64;
    p.min_tokens = 1 + static_cast<int>(rng() % 20);
    p.eos_token_ids = {3, 7};
    p.stop_token_ids = {11};
    ASSERT_TRUE(Validate(p, 100).ok());
    Sampler s(p);
    for (int step = 0; step < p.min_tokens + 3; ++step) {
      std::vector<float> logits = RandomLogits(rng, 100);
      logits[3] = logits[7] = logits[11] = 50.0f;  // the model wants to stop
      std::vector<float> masked = logits;
      s.ApplyConstraints(masked);
      const bool early = step < p.min_tokens;
      for (int32_t id : {3, 7, 11}) {
        ASSERT_EQ(masked[static_cast<size_t>(id)], early ? -inf : 50.0f) << "step " << step;
      }
      const int32_t t = s.Sample(logits);
      if (early) {
        ASSERT_TRUE(t != 3 && t != 7 && t != 11) << "step " << step << " of " << p.min_tokens;
      } else {
        ASSERT_TRUE(t == 3 || t == 7 || t == 11) << "step " << step;
      }
      s.Accept(t);
      ++steps;
    }
  }
  EXPECT_GT(steps, 0);
}

using ::dq::testing::QwenTokenizer;

constexpr int32_t kEos = 2;  // <|im_end|>

std::shared_ptr<const grammar::TokenVocabulary> QwenVocab() {
  static const auto* v =
      new std::shared_ptr<const grammar::TokenVocabulary>(grammar::TokenVocabulary::FromTokenizer(
          QwenTokenizer(), QwenTokenizer().vocab_size(), {kEos}));
  return *v;
}

std::shared_ptr<const grammar::CompiledGrammar> CompileFor(const std::string& schema) {
  auto g = grammar::CompileJsonSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << schema;
  return g.ok() ? grammar::CompiledGrammar::Build(std::move(*g), QwenVocab()) : nullptr;
}

TEST(SamplerConstraints, AGrammarMakesRandomSamplingWriteValidJson) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Generator gen(seed, /*bounded=*/true);
  std::mt19937_64 rng(seed);
  const int32_t vocab = QwenTokenizer().vocab_size();
  int documents = 0, tokens = 0;
  for (int round = 0; round < 40; ++round) {
    const Json schema = gen.RootSchema(gen.Int(1, 3));
    const auto compiled = CompileFor(schema.dump());
    ASSERT_NE(compiled, nullptr);
    for (int k = 0; k < 3; ++k) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.top_p = k == 1 ? 0.9f : 1.0f;
      p.seed = rng();
      p.max_tokens = 2000;
      p.min_tokens = k == 2 ? 5 : 0;
      p.eos_token_ids = {kEos};
      p.grammar = compiled;
      ASSERT_TRUE(Validate(p, vocab).ok());
      Sampler s(p);
      std::vector<int32_t> out;
      for (int step = 0; step < p.max_tokens; ++step) {
        std::vector<float> logits = RandomLogits(rng, static_cast<size_t>(vocab), 2.0f);
        const int32_t t = s.Sample(logits);
        if (t == kEos) break;
        ASSERT_TRUE(s.matcher()->compiled().vocab().bytes(t).size() > 0) << t;
        out.push_back(t);
        s.Accept(t);
        ASSERT_EQ(s.matcher()->num_accepted(), static_cast<int>(out.size()))
            << "the grammar refused sampled token " << t;
      }
      ASSERT_TRUE(s.matcher()->IsComplete()) << "no EOS within max_tokens";
      const std::string text = QwenTokenizer().Decode(out);
      EXPECT_TRUE(grammar::testing::ParsesAndValidates(schema, text))
          << "schema " << schema.dump() << "\nsampled " << text;
      ++documents;
      tokens += static_cast<int>(out.size());
    }
  }
  EXPECT_GT(documents, 0);
  std::printf("%d sampled documents valid (%d tokens)\n", documents, tokens);
}

TEST(SamplerConstraints, MinTokensHoldsEosBackUnlessTheGrammarCanOnlyEnd) {
  const int32_t vocab = QwenTokenizer().vocab_size();
  const auto digits = CompileFor(R"({"type":"integer"})");
  const auto fixed = CompileFor(R"({"const":"ok"})");
  ASSERT_TRUE(digits && fixed);
  const std::optional<int32_t> one = QwenTokenizer().TokenToId("1");
  ASSERT_TRUE(one.has_value());
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 30;
  p.min_tokens = 10;
  p.eos_token_ids = {kEos};
  for (const auto& g : {digits, fixed}) {
    p.grammar = g;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int step = 0; step < p.max_tokens; ++step) {
      std::vector<float> logits(static_cast<size_t>(vocab), 0.0f);
      logits[kEos] = 30.0f;  // the model wants to stop as soon as it may, else write "1"
      logits[static_cast<size_t>(*one)] = 5.0f;
      const int32_t t = s.Sample(logits);
      if (t == kEos) break;
      out.push_back(t);
      s.Accept(t);
    }
    if (g == digits) {
      EXPECT_EQ(QwenTokenizer().Decode(out), "1111111111")
          << "EOS is held back until min_tokens while digits may follow";
    } else {
      EXPECT_EQ(QwenTokenizer().Decode(out), "\"ok\"");
      EXPECT_LT(out.size(), 10u) << "a complete const can only end: the grammar wins";
    }
  }
}

TEST(SamplerConstraints, ValidateNamesTheBadField) {
  const auto g = CompileFor(R"({"type":"boolean"})");
  const int32_t vocab = QwenTokenizer().vocab_size();
  struct Case {
    SamplingParams p;
    int vocab;
    std::string words;
  };
  std::vector<Case> cases;
  auto add = [&](auto edit, int v, std::string words) {
    SamplingParams p;
    edit(p);
    cases.push_back({p, v, std::move(words)});
  };
  add(
      [](SamplingParams& p) {
        p.logit_bias = {{100, 1.0f}};
      },
      100, "logit_bias names token id 100");
  add([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, 100, "token id -1");
  add([](SamplingParams& p) { p.logit_bias = {{5, 100.5f}}; }, 100, "[-100, 100]");
  add([](SamplingParams& p) { p.logit_bias = {{5, std::nanf("")}}; }, 100, "[-100, 100]");
  add([](SamplingParams& p) { p.min_tokens = 17; }, 100,
      "min_tokens must be in [0, max_tokens = 16]");
  add([](SamplingParams& p) { p.min_tokens = -1; }, 100, "min_tokens");
  add([&](SamplingParams& p) { p.grammar = g; }, vocab + 1, "compiled for");
  add(
      [&](SamplingParams& p) {
        p.grammar = g;
        p.ignore_eos = true;
      },
      vocab, "ignore_eos");
  for (const Case& c : cases) {
    const absl::Status st = Validate(c.p, c.vocab);
    ASSERT_FALSE(st.ok()) << c.words;
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.words), std::string::npos) << st.message();
  }
  SamplingParams ok;
  ok.logit_bias = {{0, -100.0f}, {99, 100.0f}};
  ok.min_tokens = 16;
  EXPECT_TRUE(Validate(ok, 100).ok());
  ok.grammar = g;
  EXPECT_TRUE(Validate(ok, vocab).ok());
}

TEST(SamplerConstraints, ConstrainedSequencesAreNotDeviceSamplable) {
  SamplingParams p;
  EXPECT_TRUE(Sampler(p).DeviceSamplable());
  p.logit_bias = {{1, 2.0f}};
  EXPECT_FALSE(Sampler(p).DeviceSamplable());
  p = {};
  p.min_tokens = 1;
  EXPECT_FALSE(Sampler(p).DeviceSamplable());
  p = {};
  p.grammar = CompileFor(R"({"type":"null"})");
  EXPECT_FALSE(Sampler(p).DeviceSamplable());
}

}  // namespace
}  // namespace dq
