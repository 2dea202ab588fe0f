// JSON schema -> grammar -> matcher, judged against an independent validator
// (json_schema_testing.h): valid instances in every allowed layout are accepted, mutants are
// accepted exactly when the validator accepts them, prefixes stay viable, rollback equals a
// fresh run, and unsupported keywords are refused by name.
#include "engine/grammar/json_schema_compiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_matcher.h"
#include "tests/unit/engine/json_schema_testing.h"

namespace dq::grammar {
namespace {

using testing::FreshSeed;
using testing::Generator;
using testing::Json;
using testing::ParsesAndValidates;

// One token per byte (ids 0..255) and EOS 256: the matcher then sees exactly the bytes.
std::shared_ptr<const TokenVocabulary> ByteVocab() {
  static const auto* vocab = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    return new std::shared_ptr<const TokenVocabulary>(
        std::make_shared<TokenVocabulary>(std::move(bytes), 257, std::vector<int32_t>{256}));
  }();
  return *vocab;
}

std::shared_ptr<const CompiledGrammar> Compile(const std::string& schema) {
  absl::StatusOr<Grammar> g = CompileJsonSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status() << "\nschema: " << schema;
  if (!g.ok()) return nullptr;
  return CompiledGrammar::Build(std::move(*g), ByteVocab());
}

// The whole text is a complete document of the grammar.
bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.IsComplete();
}

struct Case {
  const char* schema;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

TEST(JsonSchemaCompiler, HandWrittenSchemasAcceptAndRejectTheRightTexts) {
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
          "required":["a"],"additionalProperties":false})",
       {R"({"a":1})", R"({"a":-20,"b":"x"})", R"({ "a": 0, "b": "" })", "{\n\"a\":\n5\n}"},
       {R"({})", R"({"b":"x"})", R"({"a":1.5})", R"({"a":"1"})", R"({"a":1,"c":2})",
        R"({"b":"x","a":1})", R"({"a":01})", R"({"a":1)", R"({  "a":1})", R"( {"a":1})"}},
      {R"({"type":"object","properties":{"p":{"type":"object","properties":{
          "q":{"type":"boolean"}},"required":["q"],"additionalProperties":false}},
          "required":["p"],"additionalProperties":false})",
       {R"({"p":{"q":true}})", R"({"p":{"q":false}})"},
       {R"({"p":{}})", R"({"p":{"q":null}})", R"({"p":true})", R"({"p":{"q":true},"r":1})"}},
      {R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})",
       {"[1]", "[1.5,2e3,-0.25]", "[ 1, 2 ]", "[0E+5]", "[1e99,9.5E-99]"},
       {"[]", "[1,2,3,4]", "[1,]", "[\"1\"]", "[.5]", "[1.]", "[--1]", "[1e400]", "[1e100]"}},
      {R"({"enum":["red","green",3,null]})", {R"("red")", "3", "null"}, {R"("blue")", "4", "[]"}},
      {R"({"const":{"k":[1,2]}})", {R"({"k":[1,2]})"}, {R"({"k":[1]})", R"({"k":[1,2,3]})"}},
      {R"({"type":["string","null"],"maxLength":2})",
       {R"("")", R"("ab")", "null", R"("\u00e9\n")", "\"\xc3\xa9\xe4\xb8\xad\""},
       {R"("abc")", "1", "true", "\"\xc3\""}},
      {R"({"anyOf":[{"type":"integer"},{"type":"array","items":{"type":"boolean"}}]})",
       {"7", "[true,false]", "[]"},
       {"7.5", "[1]", R"("x")"}},
      {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
          "required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
       {R"({"v":1})", R"({"v":1,"next":{"v":2}})", R"({"v":1,"next":5})"}},
      {R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":
          {"type":"integer"}})",
       {R"({})", R"({"a":null,"z":3})", R"({"y":1,"z":2})"},
       {R"({"z":"s"})", R"({"a":null,"z":null})"}},
      // Extra keys never spell a declared name (else an optional one left out could come back
      // with a value its schema forbids) and have no escapes (so they cannot spell one either).
      {"{\"properties\":{\"a\":{\"type\":\"integer\"},\"n\xc3\xa9\":{\"type\":\"null\"},"
       "\"q\\\"t\":{\"type\":\"null\"}}}",
       {R"({"b":"x"})", R"({"ab":1})", R"({"n":1})", "{\"n\xc3\xa9\xc3\xa9\":1}",
        "{\"n\xc3\xa8\":1}", R"({"a":1,"":2})", "{\"n\xc3\xa9\":null,\"a1\":[]}"},
       {R"({"a":"x"})", "{\"n\xc3\xa9\":1}", R"({"a":1,"a":2})", R"({"n\u00e9":1})",
        R"({"q\"t":1})", R"({"b":1,"a":2})", R"({"b\n":1})"}},
      {R"({"properties":{"q\"t\\":{"type":"integer"}},"required":["q\"t\\"],
          "additionalProperties":false})",
       {R"({"q\"t\\":5})"},
       {R"({"q\"t":5})", R"({"q\"t\\":5,"b":1})"}},
      {R"({"type":"string","minLength":2})",
       {R"("ab")", R"("\ud83d\ude00\n")", "\"\xf0\x9f\x98\x80\xf0\x9f\x98\x80\""},
       {R"("a")", R"("\ud83d\ude00")", R"("\ud800x")", R"("\udc00\udc00")", "\"\x01\x02\""}},
      {R"({"type":"integer"})", {"0", "-7", "1234567890123456"}, {"12345678901234567", "-", "1e5"}},
      {R"(true)", {"1", R"({"a":[null,{}]})", R"("s")"}, {"", "nul", "{"}},
  };
  int judged = 0;
  for (const Case& c : cases) {
    const auto g = Compile(c.schema);
    ASSERT_NE(g, nullptr);
    const Json schema = Json::parse(c.schema);
    for (const std::string& t : c.accept) {
      EXPECT_TRUE(ParsesAndValidates(schema, t)) << "bad test case " << t;
      EXPECT_TRUE(Accepts(g, t)) << c.schema << "\nshould accept: " << t;
      ++judged;
    }
    for (const std::string& t : c.reject) {
      EXPECT_FALSE(Accepts(g, t)) << c.schema << "\nshould reject: " << t;
      ++judged;
    }
  }
  EXPECT_GT(judged, 80);
}

// Applies one structural mutation to a random node of `v`: a value replaced by another of a
// random type, an object key removed, or a fresh key added. Returns false if nothing applied.
bool Mutate(Generator& gen, Json* v) {
  std::vector<Json*> nodes;
  std::vector<Json*> todo{v};
  while (!todo.empty()) {
    Json* n = todo.back();
    todo.pop_back();
    nodes.push_back(n);
    if (n->is_structured()) {
      for (auto& child : *n) todo.push_back(&child);
    }
  }
  Json* n = nodes[static_cast<size_t>(gen.Int(0, static_cast<int>(nodes.size()) - 1))];
  switch (gen.Int(0, 2)) {
    case 0:
      *n = gen.AnyValue(1);
      return true;
    case 1:
      if (!n->is_object() || n->empty()) return false;
      {
        const std::string key =
            std::next(n->begin(), gen.Int(0, static_cast<int>(n->size()) - 1)).key();
        n->erase(key);
      }
      return true;
    default:
      if (!n->is_object()) return false;
      (*n)["zz_new"] = gen.AnyValue(1);
      return true;
  }
}

TEST(JsonSchemaCompiler, RandomSchemasAcceptValidInstancesAndJudgeMutantsLikeTheValidator) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Generator gen(seed);
  int accepted = 0, mutants_rejected = 0, mutants_accepted = 0, prefixes = 0;
  for (int round = 0; round < 150; ++round) {
    const Json schema = gen.RootSchema(gen.Int(1, 3));
    const auto g = Compile(schema.dump());
    ASSERT_NE(g, nullptr);
    for (int k = 0; k < 6; ++k) {
      const Json instance = gen.Instance(schema, schema);
      ASSERT_TRUE(testing::Validates(schema, schema, instance)) << instance.dump();
      for (int style = 0; style < 5; ++style) {
        const std::string text = gen.Serialize(instance, style);
        ASSERT_TRUE(Accepts(g, text)) << "schema " << schema.dump() << "\nrejects " << text;
        ++accepted;
      }
      // Every proper prefix is viable; complete only if it is itself a valid document.
      const std::string text = gen.Serialize(instance, 4);
      GrammarMatcher m(g);
      for (size_t i = 0; i + 1 < text.size(); ++i) {
        ASSERT_TRUE(m.AcceptBytes(text.substr(i, 1))) << text << " at byte " << i;
        if (m.IsComplete()) {
          EXPECT_TRUE(ParsesAndValidates(schema, text.substr(0, i + 1))) << text.substr(0, i + 1);
        }
        ++prefixes;
      }
      Json mutant = instance;
      if (!Mutate(gen, &mutant)) continue;
      const std::string mtext = gen.Serialize(mutant, gen.Int(0, 4));
      const bool valid = ParsesAndValidates(schema, mtext);
      EXPECT_EQ(Accepts(g, mtext), valid) << "schema " << schema.dump() << "\nmutant " << mtext;
      (valid ? mutants_accepted : mutants_rejected)++;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(mutants_rejected, 50);
  EXPECT_GT(mutants_accepted, 0);
  EXPECT_GT(prefixes, 0);
  std::printf("seed %llu: %d valid texts accepted, %d mutants rejected, %d accepted, %d prefixes\n",
              static_cast<unsigned long long>(seed), accepted, mutants_rejected, mutants_accepted,
              prefixes);
}

// Compares two matchers' observable state: completeness, continuation and the next mask.
void ExpectSameState(GrammarMatcher& a, GrammarMatcher& b, const std::string& where) {
  ASSERT_EQ(a.IsComplete(), b.IsComplete()) << where;
  ASSERT_EQ(a.CanContinue(), b.CanContinue()) << where;
  std::vector<uint32_t> ma(static_cast<size_t>(a.compiled().mask_words()));
  std::vector<uint32_t> mb(ma.size());
  a.FillNextTokenMask(ma);
  b.FillNextTokenMask(mb);
  ASSERT_EQ(ma, mb) << where;
}

TEST(JsonSchemaCompiler, RollbackEqualsAFreshRun) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Generator gen(seed);
  int compared = 0;
  for (int round = 0; round < 40; ++round) {
    const Json schema = gen.RootSchema(gen.Int(1, 3));
    const auto g = Compile(schema.dump());
    ASSERT_NE(g, nullptr);
    const std::string text = gen.Serialize(gen.Instance(schema, schema), gen.Int(0, 4));
    GrammarMatcher m(g);
    std::vector<size_t> ends;  // byte offset after each accepted piece
    size_t pos = 0;
    while (pos < text.size()) {
      if (!ends.empty() && gen.Coin(0.3)) {  // undo a few pieces, then go on from there
        const int n = gen.Int(1, std::min(3, static_cast<int>(ends.size())));
        m.Rollback(n);
        ends.resize(ends.size() - static_cast<size_t>(n));
        pos = ends.empty() ? 0 : ends.back();
      }
      const size_t len = std::min<size_t>(static_cast<size_t>(gen.Int(1, 4)), text.size() - pos);
      ASSERT_TRUE(m.AcceptBytes(text.substr(pos, len)));
      pos += len;
      ends.push_back(pos);
      ASSERT_EQ(m.num_accepted(), static_cast<int>(ends.size()));
      GrammarMatcher fresh(g);
      ASSERT_TRUE(fresh.AcceptBytes(text.substr(0, pos)));
      ExpectSameState(m, fresh, text.substr(0, pos));
      ++compared;
    }
    EXPECT_TRUE(m.IsComplete()) << text;
    m.Rollback(m.num_accepted());
    GrammarMatcher fresh(g);
    ExpectSameState(m, fresh, "rolled back to the start");
    EXPECT_FALSE(m.AcceptBytes("\x01")) << "a rejected piece must change nothing";
    ExpectSameState(m, fresh, "after a rejected piece");
  }
  EXPECT_GT(compared, 0);
}

TEST(JsonSchemaCompiler, EosOnlyWhenCompleteAndNothingAfterIt) {
  const auto g = Compile(R"({"type":"object","properties":{"a":{"type":"integer"}},
                             "required":["a"],"additionalProperties":false})");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.AcceptToken(256));
  ASSERT_TRUE(m.AcceptBytes(R"({"a":12)"));
  EXPECT_FALSE(m.IsComplete());
  EXPECT_FALSE(m.IsAllowed(256));
  ASSERT_TRUE(m.AcceptBytes("}"));
  EXPECT_TRUE(m.IsComplete());
  EXPECT_TRUE(m.IsAllowed(256));
  EXPECT_FALSE(m.IsAllowed('}'));
  ASSERT_TRUE(m.AcceptToken(256));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.AcceptToken(' '));
  EXPECT_FALSE(m.AcceptToken(256));
  m.Rollback(1);
  EXPECT_TRUE(m.IsComplete());
  EXPECT_FALSE(m.IsTerminated());
}

TEST(JsonSchemaCompiler, UnsupportedFeaturesAreInvalidArgumentNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"type":"string","pattern":"^a+$"})", "pattern"},
      {R"({"type":"string","format":"date-time"})", "format"},
      {R"({"type":"integer","minimum":3})", "minimum"},
      {R"({"type":"number","multipleOf":2})", "multipleOf"},
      {R"({"oneOf":[{"type":"string"},{"type":"null"}]})", "oneOf"},
      {R"({"allOf":[{"type":"string"}]})", "allOf"},
      {R"({"not":{"type":"string"}})", "not"},
      {R"({"type":"array","prefixItems":[{"type":"string"}]})", "prefixItems"},
      {R"({"type":"object","patternProperties":{"^a":{}}})", "patternProperties"},
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})", "pattern"},
      {R"({"type":"object","properties":{"a":{"type":"date"}}})", "date"},
      {R"({"$ref":"https://example.com/s.json"})", "https://example.com/s.json"},
      {R"({"$ref":"#/$defs/missing"})", "#/$defs/missing"},
      {R"({"type":"array","maxItems":1000})", "maxItems"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "maxLength"},
      {R"({"type":"object","required":["a"],"properties":{"a":false}})", "false"},
      {R"({"anyOf":[]})", "anyOf"},
      {R"({"enum":[]})", "enum"},
      {R"({"type":"object","properties":{"a":{"$ref":"#/properties/a"}},"required":["a"]})",
       "no finite"},
      {R"({"type":"object")", "not valid JSON"},
  };
  for (const auto& [schema, word] : cases) {
    absl::StatusOr<Grammar> g = CompileJsonSchema(schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(g.status().message().find(word), std::string::npos)
        << schema << " -> " << g.status().message() << " (should name " << word << ")";
  }
}

TEST(JsonSchemaCompiler, AnyJsonObjectAcceptsObjectsOnly) {
  const auto g = Compile(std::string(kAnyJsonObjectSchema));
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Generator gen(seed);
  int judged = 0;
  for (int i = 0; i < 300; ++i) {
    const Json v = gen.AnyValue(3);
    const std::string text = gen.Serialize(v, gen.Int(0, 4));
    EXPECT_EQ(Accepts(g, text), v.is_object()) << text;
    ++judged;
  }
  EXPECT_GT(judged, 0);
}

}  // namespace
}  // namespace dq::grammar
