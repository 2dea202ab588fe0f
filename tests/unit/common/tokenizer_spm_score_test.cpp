// llama.cpp's score-ordered SentencePiece merging (TokenizerSpec::scores: the GGUF "llama"
// vocabulary path): a toy vocabulary with hand-checked results, and the HF-trained goldens of
// tokenizer_spm_test re-expressed as scores (a merged token's score = -its merge rank, as
// SentencePiece BPE models store them), which must encode exactly as HF's rank-ordered BPE.
#include <filesystem>

#include "gmock/gmock.h"
#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

using ::testing::ElementsAre;
using Ids = std::vector<int32_t>;

// ids: 0 <unk>, 1 <s>, 2..257 <0x00>..<0xFF>, then the words below.
TokenizerSpec ToySpmSpec() {
  TokenizerSpec spec;
  spec.byte_level = false;
  spec.tokens = {"<unk>", "<s>"};
  spec.token_types = {2, 3};
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(absl::StrFormat("<0x%02X>", b));
    spec.token_types.push_back(6);
  }
  const std::vector<std::pair<std::string, float>> words = {
      {"\u2581", -1}, {"a", -1},   {"b", -1},  {"c", -1},      {"ab", -3},
      {"bc", -2},     {"abc", -5}, {"aa", -4}, {"\u2581a", -6}};
  for (const auto& [w, score] : words) {
    spec.tokens.push_back(w);
    spec.token_types.push_back(1);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  for (size_t i = 0; i < words.size(); ++i) spec.scores[258 + i] = words[i].second;
  spec.unk_id = 0;
  spec.normalizer_steps = {{NormalizerStep::Kind::kPrepend, "", "\u2581"},
                           {NormalizerStep::Kind::kReplace, " ", "\u2581"}};
  using DK = DecoderStep::Kind;
  spec.decoder_steps = {
      {DK::kReplace, "\u2581", " "}, {DK::kByteFallback}, {DK::kFuse}, {DK::kStrip, "", " ", 1, 0}};
  return spec;
}

constexpr int32_t kSpace = 258, kA = 259, kB = 260, kC = 261, kAb = 262, kBc = 263, kAbc = 264,
                  kAa = 265, kSpaceA = 266;

TEST(SpmScoreTest, MergesHighestScoreFirstThenLeftmost) {
  auto tok = Tokenizer::FromSpec(ToySpmSpec());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // "▁abc": bc (-2) before ab (-3); then a+bc = abc (-5); ▁a loses its chance.
  EXPECT_THAT(tok->Encode("abc"), ElementsAre(kSpace, kAbc));
  // "▁aab": ▁a? no: a+a (-4) beats ▁a (-6) but ab (-3) beats both: ▁ a ab -> ▁a ab.
  EXPECT_THAT(tok->Encode("aab"), ElementsAre(kSpaceA, kAb));
  // "▁aaa": aa (-4) beats ▁a (-6); of the two equal aa pairs the leftmost goes first.
  EXPECT_THAT(tok->Encode("aaa"), ElementsAre(kSpace, kAa, kA));
  // Characters without a token become byte tokens; "d" is <0x64> = 2 + 0x64.
  EXPECT_THAT(tok->Encode("cd"), ElementsAre(kSpace, kC, 2 + 0x64));
  EXPECT_THAT(tok->Encode("é"), ElementsAre(kSpace, 2 + 0xC3, 2 + 0xA9));
  EXPECT_THAT(tok->Encode("<s>b"), ElementsAre(1, kSpace, kB));
  EXPECT_EQ(tok->Decode(tok->Encode("ab c é")), "ab c é");
  EXPECT_EQ(tok->Decode(Ids{kSpace, kA, kBc}), "abc");
}

// The HF goldens' tokenizer.json as a scored vocabulary.
absl::StatusOr<Tokenizer> ScoredFromHfJson(const std::string& dir) {
  const nlohmann::json j = testing::ReadJsonFile(dir + "/tokenizer.json");
  TokenizerSpec spec;
  spec.byte_level = false;
  for (const auto& [token, id] : j["model"]["vocab"].items()) {
    if (id.get<size_t>() >= spec.tokens.size()) spec.tokens.resize(id.get<size_t>() + 1);
    spec.tokens[id.get<size_t>()] = token;
  }
  std::map<std::string, float> scores;
  const auto& merges = j["model"]["merges"];
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    scores.emplace(merges[rank][0].get<std::string>() + merges[rank][1].get<std::string>(),
                   -static_cast<float>(rank));
  }
  for (const std::string& t : spec.tokens) {
    auto it = scores.find(t);
    spec.scores.push_back(it != scores.end() ? it->second : -1e9f);
  }
  for (const auto& t : j["added_tokens"]) {
    const auto id = t["id"].get<size_t>();
    if (id >= spec.tokens.size()) {
      spec.tokens.resize(id + 1);
      spec.scores.resize(id + 1, -1e9f);
    }
    spec.added_tokens.push_back({t["id"].get<int32_t>(), t["content"].get<std::string>(),
                                 t["special"].get<bool>(), false, false});
  }
  spec.unk_id = 0;  // "<unk>" (the trainer's first special token).
  spec.normalizer_steps = {{NormalizerStep::Kind::kReplace, " ", "\u2581"}};
  using DK = DecoderStep::Kind;
  spec.decoder_steps = {{DK::kReplace, "\u2581", " "}, {DK::kByteFallback}, {DK::kFuse}};
  return Tokenizer::FromSpec(std::move(spec));
}

TEST(SpmScoreTest, ScoredGemmaStyleVocabularyEncodesAsHf) {
  const std::string dir = testing::GoldenDir("spm-gemma");
  ASSERT_TRUE(std::filesystem::exists(dir + "/golden.json"))
      << dir << " is missing; run tests/golden/tokenizer/make_spm_goldens.py";
  auto tok = ScoredFromHfJson(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_EQ(tok->IdToToken(0), "<unk>");
  const nlohmann::json golden = testing::ReadJsonFile(dir + "/golden.json");
  int checked = 0, failures = 0;
  for (const auto& e : golden.at("encode")) {
    const std::string text = e.at("text").get<std::string>();
    const auto want = e.at("ids").get<Ids>();
    // fuse_unk=false in HF; llama.cpp has no unk for characters (byte tokens or nothing):
    // compare only strings whose HF encoding has no <unk>.
    if (std::find(want.begin(), want.end(), 0) != want.end()) continue;
    const Ids got = tok->Encode(text);
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << testing::Escaped(text) << "\n want " << testing::IdsToString(want)
                    << "\n got  " << testing::IdsToString(got);
    }
    ++checked;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(checked, 250);
}

}  // namespace
}  // namespace dq
