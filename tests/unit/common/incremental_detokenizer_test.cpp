// IncrementalDetokenizer: pieces are always well-formed UTF-8 and concatenate to Decode(ids).
#include "common/tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "common/tokenizer/utf8.h"
#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& Smol() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::FromHfJson(testing::GoldenDir("smollm2") + "/tokenizer.json");
    EXPECT_TRUE(t.ok()) << t.status();
    return new Tokenizer(t.ok() ? *t : Tokenizer());
  }();
  return *tok;
}

// Streams `ids`; checks every piece is well-formed and returns the concatenation.
std::string Stream(const Tokenizer& tok, const Ids& ids, bool skip_special = false) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = detok.Next(id);
    EXPECT_TRUE(tok_internal::IsValidUtf8(piece)) << testing::Escaped(piece);
    text += piece;
  }
  text += detok.Flush();
  EXPECT_EQ(detok.pending_bytes(), 0u);
  return text;
}

TEST(IncrementalDetokenizerTest, MatchesDecodeOnGoldenStrings) {
  const Tokenizer& tok = Smol();
  ASSERT_GT(tok.vocab_size(), 0);
  const auto golden = testing::ReadJsonFile(testing::GoldenDir("smollm2") + "/golden.json");
  int checked = 0;
  for (const auto& e : golden.at("encode")) {
    const std::string text = e.at("text").get<std::string>();
    const Ids ids = tok.Encode(text);
    // Not always `text`: SmolLM2's vocabulary lacks a few byte symbols (0x04, 0x1D, 0xF1, ...),
    // which HF drops too.
    EXPECT_EQ(Stream(tok, ids), tok.Decode(ids)) << testing::Escaped(text);
    EXPECT_EQ(Stream(tok, ids, true), tok.Decode(ids, true)) << testing::Escaped(text);
    ++checked;
  }
  EXPECT_GE(checked, 200);
}

TEST(IncrementalDetokenizerTest, HoldsBackSplitCharacters) {
  const Tokenizer& tok = Smol();
  const std::string family = "👨‍👩‍👧‍👦 中文 🇺🇸";
  const Ids ids = tok.Encode(family);
  ASSERT_GT(ids.size(), 8u);  // Byte-level tokens that cut characters apart.
  IncrementalDetokenizer detok(tok);
  std::string text;
  bool held_back = false;
  for (int32_t id : ids) {
    text += detok.Next(id);
    held_back |= detok.pending_bytes() > 0;
  }
  EXPECT_TRUE(held_back);
  EXPECT_EQ(text + detok.Flush(), family);
}

TEST(IncrementalDetokenizerTest, RandomByteTokensMatchDecode) {
  const Tokenizer& tok = Smol();
  std::mt19937 rng(7);
  // Single-byte tokens plus a few ordinary, special and invalid ids.
  Ids pool;
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    tok_internal::AppendUtf8(tok_internal::ByteToUnicode(static_cast<uint8_t>(b)), &symbol);
    if (auto id = tok.TokenToId(symbol)) pool.push_back(*id);
  }
  ASSERT_GT(pool.size(), 200u);
  for (int32_t id : {0, 1, 2, 1000, 20000, 49151, -1, 99999}) pool.push_back(id);
  for (int round = 0; round < 3000; ++round) {
    Ids ids(1 + rng() % 12);
    for (int32_t& id : ids) id = pool[rng() % pool.size()];
    ASSERT_EQ(Stream(tok, ids), tok.Decode(ids)) << testing::IdsToString(ids);
    ASSERT_EQ(Stream(tok, ids, true), tok.Decode(ids, true)) << testing::IdsToString(ids);
  }
}

TEST(IncrementalDetokenizerTest, FlushReplacesDanglingBytesAndResets) {
  const Tokenizer& tok = Smol();
  const int32_t lead = *tok.TokenToId("ð");  // Byte 0xF0: starts a 4-byte sequence.
  IncrementalDetokenizer detok(tok);
  EXPECT_EQ(detok.Next(lead), "");
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(detok.Next(lead), "");
  detok.Reset();
  EXPECT_EQ(detok.Flush(), "");
  EXPECT_EQ(detok.Next(*tok.TokenToId("Ġhello")), " hello");
}

}  // namespace
}  // namespace dq
