// SentencePiece-style BPE (byte fallback, "▁" spaces) against HF `tokenizers`: the goldens of
// tests/golden/tokenizer/make_spm_goldens.py (Gemma-, Llama-2- and Metaspace-style tokenizers
// trained by the library itself), every string's ids, ids with specials not parsed, decodes and
// streaming decode; plus the incremental detokenizer over <0xNN> byte tokens.
#include <filesystem>

#include "common/tokenizer/utf8.h"
#include "gmock/gmock.h"
#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

using testing::CheckGolden;
using testing::GoldenDir;
using Ids = std::vector<int32_t>;

constexpr const char* kGoldens[] = {"spm-gemma", "spm-llama2", "spm-metaspace",
                                    "spm-metaspace-nosplit"};

Tokenizer Load(const std::string& name) {
  const std::string path = GoldenDir(name) + "/tokenizer.json";
  EXPECT_TRUE(std::filesystem::exists(path))
      << path << " is missing; run tests/golden/tokenizer/make_spm_goldens.py";
  auto tok = Tokenizer::FromHfJson(path);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *tok : Tokenizer();
}

class SpmGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SpmGoldenTest, MatchesHfTokenizers) {
  const Tokenizer tok = Load(GetParam());
  ASSERT_GT(tok.vocab_size(), 0);
  EXPECT_FALSE(tok.byte_level());
  const std::string golden = GoldenDir(GetParam()) + "/golden.json";
  ASSERT_TRUE(std::filesystem::exists(golden)) << golden << " is missing";
  const auto counts = CheckGolden(tok, golden);
  EXPECT_GE(counts.strings, 350);
  EXPECT_GE(counts.decodes, 80);
}

INSTANTIATE_TEST_SUITE_P(Goldens, SpmGoldenTest, ::testing::ValuesIn(kGoldens),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

// Streams `ids`, checking every piece is well-formed UTF-8; returns the pieces.
std::vector<std::string> StreamPieces(const Tokenizer& tok, const Ids& ids) {
  IncrementalDetokenizer detok(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    pieces.push_back(detok.Next(id));
    EXPECT_TRUE(tok_internal::IsValidUtf8(pieces.back())) << testing::Escaped(pieces.back());
  }
  pieces.push_back(detok.Flush());
  return pieces;
}

int32_t Id(const Tokenizer& tok, const std::string& token) {
  auto id = tok.TokenToId(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

TEST(SpmDetokenizerTest, ByteFallbackCharacterComesOutWhenComplete) {
  const Tokenizer tok = Load("spm-gemma");
  ASSERT_GT(tok.vocab_size(), 0);
  // U+4E16 (3 bytes) and U+00E9 as byte tokens around ordinary tokens.
  const Ids ids = {Id(tok, "▁"),      Id(tok, "<0xE4>"), Id(tok, "<0xB8>"), Id(tok, "<0x96>"),
                   Id(tok, "<0xC3>"), Id(tok, "<0xA9>"), Id(tok, "a")};
  const auto pieces = StreamPieces(tok, ids);
  EXPECT_THAT(pieces, ::testing::ElementsAre(" ", "", "", "\xE4\xB8\x96", "", "\xC3\xA9", "a", ""));
  std::string all;
  for (const auto& p : pieces) all += p;
  EXPECT_EQ(all, tok.Decode(ids));
}

TEST(SpmDetokenizerTest, EncodedByteFallbackTextStreamsBackExactly) {
  for (const char* name : kGoldens) {
    const Tokenizer tok = Load(name);
    ASSERT_GT(tok.vocab_size(), 0);
    const std::string text = "x 中文字 ✓ 𝔘 é\tÿ";
    const Ids ids = tok.Encode(text);
    int byte_tokens = 0;
    for (int32_t id : ids) byte_tokens += tok.IdToToken(id).starts_with("<0x") ? 1 : 0;
    EXPECT_GT(byte_tokens, 2) << name;
    std::string all;
    for (const auto& p : StreamPieces(tok, ids)) all += p;
    EXPECT_EQ(all, tok.Decode(ids)) << name;
  }
}

TEST(SpmDetokenizerTest, LlamaStripsTheLeadingSpaceOnce) {
  const Tokenizer tok = Load("spm-llama2");
  ASSERT_GT(tok.vocab_size(), 0);
  EXPECT_EQ(tok.strip_start(), 1);
  // Prepend makes "▁▁▁two"; the decoder's Strip takes back only the prepended space.
  const Ids ids = tok.Encode("  two spaces");
  const auto pieces = StreamPieces(tok, ids);
  std::string all;
  for (const auto& p : pieces) all += p;
  EXPECT_EQ(all, "  two spaces");
  EXPECT_EQ(tok.Decode(ids), "  two spaces");
}

TEST(SpmDetokenizerTest, BrokenByteRunDecodesAsHfDoes) {
  const Tokenizer tok = Load("spm-gemma");
  ASSERT_GT(tok.vocab_size(), 0);
  // HF: a run of byte tokens that is not valid UTF-8 gives one U+FFFD per token, the valid
  // "é" in it included.
  const Ids ids = {Id(tok, "<0xC3>"), Id(tok, "<0xA9>"), Id(tok, "<0xE4>"), Id(tok, "a")};
  EXPECT_EQ(tok.Decode(ids),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "a");
  std::string all;
  for (const auto& p : StreamPieces(tok, ids)) all += p;
  EXPECT_EQ(all,
            "\xC3\xA9\xEF\xBF\xBD"
            "a");  // Streaming: the documented difference.
}

}  // namespace
}  // namespace dq
