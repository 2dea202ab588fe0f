// Golden tests: dqserve's tokenizer against HF `tokenizers` on the committed tokenizer.json
// files (tests/golden/tokenizer/*/), every string: ids, ids with specials not parsed, decode
// with and without skipping specials, and streaming decode.
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

using testing::CheckGolden;
using testing::GoldenDir;

TEST(TokenizerGoldenTest, SmolLM2TokenizerJson) {
  auto tok = Tokenizer::FromHfJson(GoldenDir("smollm2") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kSmolLM);
  EXPECT_EQ(tok->normalizer(), Normalizer::kNone);
  EXPECT_EQ(tok->vocab_size(), 49152);
  const auto counts = CheckGolden(*tok, GoldenDir("smollm2") + "/golden.json");
  EXPECT_GE(counts.strings, 200);
  EXPECT_GE(counts.decodes, 50);
}

TEST(TokenizerGoldenTest, QwenStyleTokenizerJson) {
  auto tok = Tokenizer::FromHfJson(GoldenDir("qwen-style") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizer::kQwen2);
  EXPECT_EQ(tok->normalizer(), Normalizer::kNfc);
  EXPECT_EQ(tok->vocab_size(), 49154);
  EXPECT_TRUE(tok->IsSpecial(*tok->TokenToId("<|im_start|>")));
  EXPECT_FALSE(tok->IsSpecial(*tok->TokenToId("<think>")));
  EXPECT_TRUE(tok->IsAdded(*tok->TokenToId("<think>")));
  const auto counts = CheckGolden(*tok, GoldenDir("qwen-style") + "/golden.json");
  EXPECT_GE(counts.strings, 200);
}

// Local cross-checks against other vocabularies: DQ_TOKENIZER_EXTRA_GOLDEN is a
// colon-separated list of directories made by make_tokenizer_golden.py --vocab-gguf ... --out.
TEST(TokenizerGoldenTest, ExtraGoldenDirs) {
  const char* env = std::getenv("DQ_TOKENIZER_EXTRA_GOLDEN");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "DQ_TOKENIZER_EXTRA_GOLDEN not set";
  std::stringstream dirs(env);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    auto tok = Tokenizer::FromHfJson(dir + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    const auto counts = CheckGolden(*tok, dir + "/golden.json");
    std::cout << dir << ": " << PreTokenizerName(tok->pre_tokenizer()) << ", " << counts.strings
              << " strings checked\n";
  }
}

}  // namespace
}  // namespace dq
