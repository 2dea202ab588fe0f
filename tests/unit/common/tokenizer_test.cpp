// Tokenizer unit tests on a hand-made byte-level vocabulary: BPE merging, added tokens,
// parse_special, decoding edge cases, and the errors FromSpec / FromHfJson report.
#include "common/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace dq {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

// The byte-level symbol of `text`'s bytes ("Ġw" for " w").
std::string Sym(std::string_view text) {
  std::string out;
  tok_internal::AppendByteLevel(text, &out);
  return out;
}

// Ids 0-255: the 256 byte symbols in byte order; then merged tokens.
TokenizerSpec ToySpec() {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.tokens.push_back(Sym(std::string(1, static_cast<char>(b))));
  const std::pair<std::string, std::string> merges[] = {{"h", "e"},    {"l", "l"}, {"he", "ll"},
                                                        {"hell", "o"}, {"Ġ", "w"}, {"a", "b"}};
  for (const auto& [a, b] : merges) {
    spec.merges.emplace_back(a, b);
    spec.tokens.push_back(a + b);  // ids 256..261
  }
  spec.tokens.push_back("abc");          // 262: only reachable with ignore_merges
  spec.tokens.push_back("<|special|>");  // 263
  spec.tokens.push_back("<x>");          // 264
  spec.tokens.push_back("<s>");          // 265
  spec.token_types.assign(spec.tokens.size(), 1);
  spec.token_types[263] = static_cast<int32_t>(GgufTokenType::kControl);
  spec.token_types[264] = static_cast<int32_t>(GgufTokenType::kUserDefined);
  spec.added_tokens.push_back({265, "<s>", true, /*lstrip=*/true, /*rstrip=*/true});
  spec.bos_id = 265;
  spec.eos_id = 263;
  return spec;
}

Tokenizer Toy(PreTokenizer pre = PreTokenizer::kGpt2, bool ignore_merges = false) {
  TokenizerSpec spec = ToySpec();
  spec.pre_tokenizer = pre;
  spec.ignore_merges = ignore_merges;
  auto tok = Tokenizer::FromSpec(std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *tok;
}

TEST(TokenizerTest, MergesByRank) {
  const Tokenizer tok = Toy();
  EXPECT_THAT(tok.Encode("hello"), ElementsAre(259));
  EXPECT_THAT(tok.Encode("hello world"), ElementsAre(259, 260, 'o', 'r', 'l', 'd'));
  EXPECT_THAT(tok.Encode("hell"), ElementsAre(258));
  EXPECT_THAT(tok.Encode("llo"), ElementsAre(257, 'o'));
  EXPECT_THAT(tok.Encode("abc"), ElementsAre(261, 'c'));
  EXPECT_EQ(tok.Decode(tok.Encode("hello world")), "hello world");
  EXPECT_TRUE(tok.Encode("").empty());
}

TEST(TokenizerTest, IgnoreMergesEmitsWholeTokens) {
  EXPECT_THAT(Toy(PreTokenizer::kLlama3, true).Encode("abc"), ElementsAre(262));
  EXPECT_THAT(Toy(PreTokenizer::kLlama3, false).Encode("abc"), ElementsAre(261, 'c'));
}

TEST(TokenizerTest, AddedTokensAndParseSpecial) {
  const Tokenizer tok = Toy();
  EXPECT_THAT(tok.Encode("he<|special|>ll"), ElementsAre(256, 263, 257));
  EXPECT_THAT(tok.Encode("<x><x>"), ElementsAre(264, 264));
  // parse_special=false: specials are plain text, non-special added tokens still match.
  const Ids plain = tok.Encode("<|special|><x>", /*parse_special=*/false);
  EXPECT_EQ(plain.back(), 264);
  EXPECT_EQ(plain.size(), 12u);  // 11 byte ids for "<|special|>", then <x>.
  EXPECT_EQ(tok.Decode(plain), "<|special|><x>");
  // lstrip/rstrip swallow the surrounding whitespace.
  EXPECT_THAT(tok.Encode("a  <s>\n b"), ElementsAre('a', 265, 'b'));
  EXPECT_TRUE(tok.IsSpecial(263));
  EXPECT_TRUE(tok.IsSpecial(265));
  EXPECT_FALSE(tok.IsSpecial(264));
  EXPECT_TRUE(tok.IsAdded(264));
  EXPECT_FALSE(tok.IsAdded(259));
  EXPECT_EQ(tok.Decode(Ids{256, 263, 264, 257}), "he<|special|><x>ll");
  EXPECT_EQ(tok.Decode(Ids{256, 263, 264, 257}, /*skip_special=*/true), "he<x>ll");
}

TEST(TokenizerTest, Accessors) {
  const Tokenizer tok = Toy();
  EXPECT_EQ(tok.vocab_size(), 266);
  EXPECT_EQ(tok.TokenToId("Ġw"), 260);
  EXPECT_EQ(tok.TokenToId("nope"), std::nullopt);
  EXPECT_EQ(tok.IdToToken(260), "Ġw");
  EXPECT_EQ(tok.IdToToken(-1), "");
  EXPECT_EQ(tok.IdToToken(266), "");
  EXPECT_FALSE(tok.IsSpecial(-3));
  EXPECT_EQ(tok.bos_id(), 265);
  EXPECT_EQ(tok.eos_id(), 263);
  Tokenizer copy = tok;
  EXPECT_TRUE(copy.SetBosEos(std::nullopt, 1).ok());
  EXPECT_EQ(copy.eos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 263);
  EXPECT_THAT(copy.SetBosEos(9999, 1).message(), HasSubstr("outside the vocabulary"));
}

TEST(TokenizerTest, DecodeSkipsInvalidIdsAndReplacesBrokenUtf8) {
  const Tokenizer tok = Toy();
  EXPECT_EQ(tok.Decode(Ids{-1, 'h', 100000, 'i', INT32_MIN}), "hi");
  EXPECT_EQ(tok.Decode(Ids{0xE4, 0xB8}), "\xEF\xBF\xBD");        // Truncated 3-byte char.
  EXPECT_EQ(tok.Decode(Ids{0xE4, 0xB8, 0xAD}), "\xE4\xB8\xAD");  // 中
  EXPECT_EQ(tok.Decode(Ids{0xFF, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(tok.TokenBytes(0xE4), "\xE4");
  EXPECT_EQ(tok.TokenBytes(-1), "");
}

TEST(TokenizerTest, EncodeReplacesIllFormedInput) {
  const Tokenizer tok = Toy();
  EXPECT_EQ(tok.Decode(tok.Encode("a\xFF"
                                  "b\xE4")),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(TokenizerTest, DefaultConstructedIsEmpty) {
  const Tokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 0);
  EXPECT_TRUE(tok.Encode("hello").empty());
  EXPECT_EQ(tok.Decode(Ids{1, 2}), "");
}

TEST(TokenizerTest, FromSpecErrors) {
  EXPECT_THAT(Tokenizer::FromSpec({}).status().message(), HasSubstr("no tokens"));
  TokenizerSpec bad_merge = ToySpec();
  bad_merge.merges.emplace_back("x", "y");
  EXPECT_THAT(Tokenizer::FromSpec(bad_merge).status().message(), HasSubstr("(missing: \"xy\")"));
  TokenizerSpec bad_bos = ToySpec();
  bad_bos.bos_id = 5000;
  EXPECT_THAT(Tokenizer::FromSpec(bad_bos).status().message(),
              HasSubstr("BOS id 5000 is outside the vocabulary"));
  TokenizerSpec bad_types = ToySpec();
  bad_types.token_types.pop_back();
  EXPECT_THAT(Tokenizer::FromSpec(bad_types).status().message(), HasSubstr("token types"));
  TokenizerSpec bad_regex = ToySpec();
  bad_regex.pre_tokenizer = PreTokenizer::kCustom;
  bad_regex.pre_tokenizer_regexes = {"(unclosed"};
  EXPECT_THAT(Tokenizer::FromSpec(bad_regex).status().message(), HasSubstr("does not compile"));
  EXPECT_THAT(SplitMergeLine("abc").status().message(), HasSubstr("one space"));
  EXPECT_EQ(SplitMergeLine("Ġ t").value(), std::make_pair(std::string("Ġ"), std::string("t")));
}

// A tokenizer.json for the toy vocabulary, with `edit` applied.
std::string ToyJson(const std::function<void(nlohmann::json&)>& edit) {
  const TokenizerSpec spec = ToySpec();
  nlohmann::json j;
  j["model"] = {{"type", "BPE"}, {"vocab", nlohmann::json::object()}, {"merges", {}}};
  for (size_t i = 0; i < 262; ++i) j["model"]["vocab"][spec.tokens[i]] = i;
  for (const auto& [a, b] : spec.merges) j["model"]["merges"].push_back(a + " " + b);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = {{{"id", 300}, {"content", "<|end|>"}, {"special", true}}};
  edit(j);
  return j.dump();
}

TEST(TokenizerTest, FromHfJsonVariants) {
  auto tok = Tokenizer::FromHfJsonString(ToyJson([](nlohmann::json&) {}));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->vocab_size(), 301);  // The added token's id extends the vocabulary.
  EXPECT_THAT(tok->Encode("hello<|end|>"), ElementsAre(259, 300));
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kGpt2);
  EXPECT_EQ(tok->Decode(Ids{262, 280, 259}), "hello");  // Ids with no token decode to nothing.

  auto pairs = Tokenizer::FromHfJsonString(ToyJson([](nlohmann::json& j) {
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& m : j["model"]["merges"]) {
      const std::string s = m.get<std::string>();
      merges.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
    }
    j["model"]["merges"] = merges;
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"String", "|"}}}, {"behavior", "Isolated"}},
          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  }));
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(pairs->pre_tokenizer(), PreTokenizer::kCustom);
  EXPECT_THAT(pairs->Encode("he|ll o"), ElementsAre(256, '|', 257, ' ', 'o'));
}

TEST(TokenizerTest, FromHfJsonErrors) {
  auto error = [](const std::function<void(nlohmann::json&)>& edit) {
    return std::string(Tokenizer::FromHfJsonString(ToyJson(edit), "t.json").status().message());
  };
  EXPECT_THAT(error([](auto& j) { j["model"]["type"] = "WordPiece"; }),
              HasSubstr("t.json: unsupported tokenizer: model.type \"WordPiece\""));
  EXPECT_THAT(error([](auto& j) {
                j["normalizer"] = {{"type", "Lowercase"}};
              }),
              HasSubstr("normalizer \"Lowercase\""));
  EXPECT_THAT(error([](auto& j) {
                j["pre_tokenizer"] = {{"type", "Whitespace"}};
              }),
              HasSubstr("pre_tokenizer \"Whitespace\""));
  EXPECT_THAT(error([](auto& j) { j["pre_tokenizer"]["add_prefix_space"] = true; }),
              HasSubstr("add_prefix_space"));
  EXPECT_THAT(error([](auto& j) { j["pre_tokenizer"] = nullptr; }), HasSubstr("no ByteLevel"));
  EXPECT_THAT(error([](auto& j) {
                j["decoder"] = {{"type", "WordPiece"}};
              }),
              HasSubstr("decoder \"WordPiece\""));
  EXPECT_THAT(error([](auto& j) { j["model"]["byte_fallback"] = true; }),
              HasSubstr("byte_fallback"));
  EXPECT_THAT(error([](auto& j) { j["added_tokens"][0]["single_word"] = true; }),
              HasSubstr("single_word"));
  EXPECT_THAT(error([](auto& j) { j["model"]["merges"].push_back(42); }),
              HasSubstr("neither \"a b\" nor"));
  EXPECT_THAT(error([](auto& j) { j["model"]["vocab"] = 3; }), HasSubstr("model.vocab"));
  EXPECT_THAT(std::string(Tokenizer::FromHfJsonString("{oops", "t.json").status().message()),
              HasSubstr("t.json: malformed tokenizer.json"));
  EXPECT_EQ(Tokenizer::FromHfJson("/nonexistent/tokenizer.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Utf8Test, LossyReplacesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    tok_internal::AppendUtf8Lossy(s, &out);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("\xF0\x9F\x98"
                  "A"),
            r + "A");
  EXPECT_EQ(lossy("\xC0\x80"), r + r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // Surrogate.
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);
  EXPECT_EQ(lossy("\xE4\xB8\xE4\xB8\xAD"), r + "\xE4\xB8\xAD");
  EXPECT_EQ(tok_internal::IncompleteUtf8TailLen("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(tok_internal::IncompleteUtf8TailLen("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(tok_internal::IncompleteUtf8TailLen("a\xC3"), 1u);
  EXPECT_EQ(tok_internal::IncompleteUtf8TailLen("a\xE0\x80"), 0u);  // Already invalid.
}

}  // namespace
}  // namespace dq
