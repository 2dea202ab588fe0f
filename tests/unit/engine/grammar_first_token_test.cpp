// A grammar's mask is on the bytes the detokenizer emits: SentencePiece-style decoders drop the
// first token's leading space (Metaspace) or strip it (Llama 2's Strip), so "▁t" writes "t" as
// the output's first token. Judged against a fresh IncrementalDetokenizer, as the router and
// the generator decode, on the SentencePiece and byte-level golden tokenizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_matcher.h"
#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/token_vocabulary.h"
#include "engine/sampler/sampler.h"
#include "tests/unit/engine/json_schema_testing.h"

namespace dq::grammar {
namespace {

using testing::FreshSeed;
using testing::Json;

constexpr const char* kTokenizers[] = {"spm-llama2", "spm-metaspace", "spm-metaspace-nosplit",
                                       "spm-gemma", "qwen-style"};
constexpr const char* kSchemas[] = {
    R"({"type":"boolean"})", R"({"anyOf":[{"type":"null"},{"type":"integer"}]})",
    R"({"enum":["tea","toast",true]})",
    R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"],
        "additionalProperties":false})"};

Tokenizer Load(const std::string& name) {
  auto t = Tokenizer::FromHfJson(std::string(DQ_SOURCE_DIR) + "/tests/golden/tokenizer/" + name +
                                 "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return t.ok() ? *t : Tokenizer();
}

// What a fresh detokenizer (special tokens skipped, as the router's) writes for `ids`.
std::string Emitted(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer d(tok, /*skip_special=*/true);
  std::string out;
  for (int32_t id : ids) out += d.Next(id);
  return out + d.Flush();
}

// An id no grammar allows: past the tokenizer, so it is an EOS that writes nothing.
int32_t EosOf(const Tokenizer& tok) { return tok.vocab_size(); }

TEST(GrammarFirstToken, TheFirstMaskAllowsExactlyTheTokensWhoseEmittedTextFits) {
  int judged = 0, differing_allowed = 0;
  for (const char* name : kTokenizers) {
    const Tokenizer tok = Load(name);
    ASSERT_GT(tok.vocab_size(), 0);
    const auto vocab = TokenVocabulary::FromTokenizer(tok, tok.vocab_size() + 1, {EosOf(tok)});
    for (const char* schema : kSchemas) {
      auto g = CompileJsonSchema(schema);
      ASSERT_TRUE(g.ok()) << g.status();
      const auto compiled = CompiledGrammar::Build(std::move(*g), vocab);
      GrammarMatcher m(compiled);
      std::vector<uint32_t> mask(static_cast<size_t>(compiled->mask_words()));
      m.FillNextTokenMask(mask);
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        const std::string text = Emitted(tok, {id});
        GrammarMatcher ref(compiled);
        const bool fits = !tok.IsSpecial(id) && !text.empty() && ref.AcceptBytes(text);
        const bool bit = (mask[id / 32] >> (id % 32)) & 1u;
        ASSERT_EQ(bit, fits) << name << " " << schema << ": id " << id << " '" << tok.IdToToken(id)
                             << "' writes '" << text << "'";
        ASSERT_EQ(m.IsAllowed(id), fits) << name << " id " << id;
        if (fits) {
          GrammarMatcher by_token(compiled);
          ASSERT_TRUE(by_token.AcceptToken(id));
          EXPECT_EQ(by_token.IsComplete(), ref.IsComplete()) << name << " id " << id;
          differing_allowed += text != tok.TokenBytes(id);
        }
        ++judged;
      }
    }
  }
  EXPECT_GT(judged, 0);
  EXPECT_GT(differing_allowed, 0) << "no first token whose leading space goes was judged";
  std::printf("%d first tokens judged, %d allowed only as the first token's text\n", judged,
              differing_allowed);
}

// Whether some token may start the document (spm-metaspace-nosplit has no ByteFallback
// decoder: its <0x7B> writes "<0x7B>", so no token writes '{').
bool CanStart(const std::shared_ptr<const CompiledGrammar>& g) {
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(g->mask_words()));
  m.FillNextTokenMask(mask);
  return std::any_of(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; });
}

TEST(GrammarFirstToken, SampledOutputDecodesToValidJsonOnEveryTokenizer) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int documents = 0, dead_ends = 0;
  for (const char* name : kTokenizers) {
    const Tokenizer tok = Load(name);
    const int32_t eos = EosOf(tok);
    const auto vocab = TokenVocabulary::FromTokenizer(tok, tok.vocab_size() + 1, {eos});
    for (const char* schema : kSchemas) {
      auto g = CompileJsonSchema(schema);
      ASSERT_TRUE(g.ok()) << g.status();
      const auto compiled = CompiledGrammar::Build(std::move(*g), vocab);
      for (int k = 0; k < 10; ++k) {
        SamplingParams p;
        p.seed = rng();
        p.max_tokens = 200;
        p.eos_token_ids = {eos};
        p.grammar = compiled;
        Sampler s(p);
        std::vector<int32_t> out;
        std::normal_distribution<float> d(0.0f, 3.0f);
        for (int step = 0; step < p.max_tokens; ++step) {
          std::vector<float> logits(static_cast<size_t>(vocab->vocab_size()));
          for (float& l : logits) l = d(rng);
          const int32_t t = s.Sample(logits);
          if (t == eos) break;
          out.push_back(t);
          s.Accept(t);
        }
        const std::string text = Emitted(tok, out);
        if (!CanStart(compiled)) {  // a vocabulary that cannot write the first byte
          EXPECT_TRUE(out.empty()) << name << ": the dead end must end the sequence at once";
          ++dead_ends;
          continue;
        }
        EXPECT_TRUE(testing::ParsesAndValidates(Json::parse(schema), text))
            << name << " " << schema << ": '" << text << "'";
        ++documents;
      }
    }
  }
  EXPECT_GT(documents, 0);
  std::printf("%d sampled documents valid, %d dead ends ended at once\n", documents, dead_ends);
}

}  // namespace
}  // namespace dq::grammar
