// The precomputed token masks (CompiledGrammar / GrammarMatcher::FillNextTokenMask) equal brute
// force (the matcher walking every token's bytes from the current stacks) on a real tokenizer's
// vocabulary, at states along random valid documents of random schemas.
#include "engine/grammar/compiled_grammar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "engine/grammar/grammar_matcher.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/token_vocabulary.h"
#include "tests/unit/engine/json_schema_testing.h"
#include "tests/unit/engine/qwen_test_tokenizer.h"

namespace dq::grammar {
namespace {

using testing::FreshSeed;
using testing::Generator;
using testing::Json;

constexpr int32_t kEos = 2;       // <|im_end|>
constexpr int32_t kPadding = 40;  // logit rows past the tokenizer's ids (never allowed)

using ::dq::testing::QwenTokenizer;

std::shared_ptr<const TokenVocabulary> QwenVocab() {
  static const auto* vocab =
      new std::shared_ptr<const TokenVocabulary>(TokenVocabulary::FromTokenizer(
          QwenTokenizer(), QwenTokenizer().vocab_size() + kPadding, {kEos, 0}));
  return *vocab;
}

std::vector<uint32_t> Mask(GrammarMatcher& m) {
  std::vector<uint32_t> w(static_cast<size_t>(m.compiled().mask_words()));
  m.FillNextTokenMask(w);
  return w;
}

std::vector<uint32_t> BruteForce(GrammarMatcher& m) {
  const int32_t n = m.compiled().vocab().vocab_size();
  std::vector<uint32_t> w(static_cast<size_t>(m.compiled().mask_words()), 0);
  for (int32_t id = 0; id < n; ++id) {
    if (m.IsAllowed(id)) w[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  return w;
}

bool Bit(const std::vector<uint32_t>& w, int32_t id) { return (w[id / 32] >> (id % 32)) & 1u; }

// The first few ids where two masks differ, for the failure message.
std::string Diff(const std::vector<uint32_t>& mask, const std::vector<uint32_t>& ref,
                 const TokenVocabulary& v) {
  std::string out;
  int shown = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(mask.size() * 32) && shown < 8; ++id) {
    if (Bit(mask, id) == Bit(ref, id)) continue;
    out += "\n  id " + std::to_string(id) + " '" + std::string(v.bytes(id)) +
           "' mask=" + std::to_string(Bit(mask, id)) + " brute=" + std::to_string(Bit(ref, id));
    ++shown;
  }
  return out;
}

int Popcount(const std::vector<uint32_t>& w) {
  int n = 0;
  for (uint32_t x : w) n += __builtin_popcount(x);
  return n;
}

TEST(CompiledGrammar, MasksEqualBruteForceOnTheQwenVocabularyForRandomSchemas) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Generator gen(seed);
  const auto vocab = QwenVocab();
  ASSERT_GT(vocab->sorted_ids().size(), 40000u);
  int schemas = 0, states = 0, path_tokens = 0, walk_steps = 0;
  double build_ms = 0;
  for (int round = 0; round < 100; ++round) {
    const Json schema = gen.RootSchema(gen.Int(1, 3));
    absl::StatusOr<Grammar> g = CompileJsonSchema(schema.dump());
    ASSERT_TRUE(g.ok()) << g.status() << "\n" << schema.dump();
    const auto compiled = CompiledGrammar::Build(std::move(*g), vocab);
    build_ms += compiled->stats().build_ms;
    ++schemas;
    // A valid document, tokenized as the model would write it: every token must be allowed;
    // the mask is compared with brute force at a few of the states on the way and at the end.
    const std::string text = gen.Serialize(gen.Instance(schema, schema), gen.Int(0, 4));
    const std::vector<int32_t> ids = QwenTokenizer().Encode(text, /*parse_special=*/false);
    GrammarMatcher m(compiled);
    const double p_compare = std::min(1.0, 4.0 / static_cast<double>(ids.size() + 1));
    for (size_t i = 0; i <= ids.size(); ++i) {
      const bool last = i == ids.size();
      std::vector<uint32_t> mask = Mask(m);
      if (last || i == 0 || gen.Coin(p_compare)) {
        const std::vector<uint32_t> ref = BruteForce(m);
        ASSERT_EQ(mask, ref) << schema.dump() << "\nafter " << i << " tokens of " << text
                             << Diff(mask, ref, *vocab);
        ++states;
      }
      const int32_t next = last ? kEos : ids[i];
      ASSERT_TRUE(Bit(mask, next)) << "token " << next << " '" << vocab->bytes(next)
                                   << "' of a valid document masked out: " << text;
      ASSERT_TRUE(m.AcceptToken(next));
      ++path_tokens;
    }
    EXPECT_TRUE(m.IsTerminated());
    // A random walk: tokens drawn from the mask itself, compared at every step.
    GrammarMatcher w(compiled);
    for (int step = 0; step < 3 && !w.IsTerminated(); ++step) {
      const std::vector<uint32_t> mask = Mask(w);
      const std::vector<uint32_t> ref = BruteForce(w);
      ASSERT_EQ(mask, ref) << schema.dump() << "\nrandom walk step " << step
                           << Diff(mask, ref, *vocab);
      ++states;
      const int allowed = Popcount(mask);
      ASSERT_GT(allowed, 0) << "a live matcher must allow some token";
      int pick = gen.Int(0, allowed - 1);
      int32_t id = 0;
      for (; id < static_cast<int32_t>(mask.size() * 32); ++id) {
        if (Bit(mask, id) && pick-- == 0) break;
      }
      ASSERT_TRUE(w.AcceptToken(id)) << id;
      ++walk_steps;
    }
  }
  EXPECT_GE(schemas, 100);
  EXPECT_GT(states, 0);
  std::printf(
      "%d schemas, %d states compared with brute force, %d path tokens, %d walk steps, "
      "mask precompute %.1f ms per schema\n",
      schemas, states, path_tokens, walk_steps, build_ms / schemas);
}

// Nesting up to the matcher's depth cap (StackArena's kMaxStackDepth): the precomputed sets come
// from a bottom frame, so near the cap the mask must still equal brute force (a token whose
// calls the cap drops is refused by both), and closing stays possible.
TEST(CompiledGrammar, MasksEqualBruteForceUpToTheDepthCap) {
  absl::StatusOr<Grammar> g = CompileJsonSchema(std::string(kAnyJsonObjectSchema));
  ASSERT_TRUE(g.ok()) << g.status();
  const auto compiled = CompiledGrammar::Build(std::move(*g), QwenVocab());
  GrammarMatcher m(compiled);
  ASSERT_TRUE(m.AcceptBytes(R"({"a":)"));
  int levels = 0, compared = 0;
  for (; levels < 400 && m.AcceptBytes("["); ++levels) {
    if (levels < 100 && levels % 25 != 0) continue;
    const std::vector<uint32_t> mask = Mask(m);
    const std::vector<uint32_t> ref = BruteForce(m);
    ASSERT_EQ(mask, ref) << "at nesting " << levels << Diff(mask, ref, *QwenVocab());
    ++compared;
  }
  EXPECT_LT(levels, 400) << "the depth cap never refused a '['";
  const std::vector<uint32_t> mask = Mask(m);
  const std::vector<uint32_t> ref = BruteForce(m);
  EXPECT_EQ(mask, ref) << "at the cap" << Diff(mask, ref, *QwenVocab());
  EXPECT_FALSE(Bit(mask, static_cast<int32_t>(*QwenTokenizer().TokenToId("["))));
  EXPECT_TRUE(Bit(mask, static_cast<int32_t>(*QwenTokenizer().TokenToId("]"))));
  EXPECT_GT(compared, 10);
  std::printf("the cap refused '[' after %d levels; %d masks compared\n", levels, compared);
}

TEST(CompiledGrammar, PaddingIdsSpecialTokensAndEosFollowTheGrammar) {
  absl::StatusOr<Grammar> g = CompileJsonSchema(R"({"type":"object","properties":{
      "k":{"type":"boolean"}},"required":["k"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status();
  const auto compiled = CompiledGrammar::Build(std::move(*g), QwenVocab());
  GrammarMatcher m(compiled);
  const int32_t n = QwenTokenizer().vocab_size();
  std::vector<uint32_t> mask = Mask(m);
  for (int32_t id = n; id < n + kPadding; ++id) EXPECT_FALSE(Bit(mask, id)) << id;
  EXPECT_FALSE(Bit(mask, 1)) << "<|im_start|> is special: never allowed";
  EXPECT_FALSE(Bit(mask, kEos));
  ASSERT_TRUE(m.AcceptBytes(R"({"k":true})"));
  mask = Mask(m);
  EXPECT_TRUE(Bit(mask, kEos));
  EXPECT_TRUE(Bit(mask, 0)) << "every EOS id is allowed once complete";
  EXPECT_EQ(Popcount(mask), 2) << "a complete object can only end";
}

}  // namespace
}  // namespace dq::grammar
