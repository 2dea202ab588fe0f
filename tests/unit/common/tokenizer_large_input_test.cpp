// Encoding speed on the real SmolLM2 / Qwen-style vocabularies: 100 KB of English-like text
// must encode well under a second, and so must pathological single-piece inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "tests/unit/common/tokenizer_golden_util.h"

namespace dq {
namespace {

// ~`bytes` of varied English-like prose: random words from a list, punctuation, numbers.
std::string EnglishText(size_t bytes) {
  static const char* kWords[] = {
      "the",         "of",          "and",          "to",          "in",        "is",
      "was",         "that",        "for",          "it",          "with",      "as",
      "his",         "on",          "be",           "at",          "by",        "had",
      "are",         "but",         "from",         "or",          "have",      "an",
      "they",        "which",       "one",          "you",         "were",      "all",
      "we",          "when",        "there",        "can",         "been",      "has",
      "more",        "if",          "will",         "would",       "about",     "people",
      "language",    "model",       "tokenizer",    "inference",   "server",    "quickly",
      "between",     "through",     "Government",   "different",   "important", "understanding",
      "information", "development", "particularly", "nevertheless"};
  std::mt19937 rng(42);
  std::string text;
  while (text.size() < bytes) {
    const int words = 5 + static_cast<int>(rng() % 15);
    for (int w = 0; w < words; ++w) {
      if (w > 0) text += ' ';
      std::string word = kWords[rng() % std::size(kWords)];
      if (rng() % 7 == 0) word += std::to_string(rng() % 2000);
      if (w == 0) word[0] = static_cast<char>(std::toupper(word[0]));
      text += word;
    }
    text += rng() % 5 == 0 ? ".\n\n" : rng() % 3 == 0 ? ", " : ". ";
  }
  return text.substr(0, bytes);
}

double MillisToEncode(const Tokenizer& tok, const std::string& text, size_t* num_ids) {
  const auto start = std::chrono::steady_clock::now();
  *num_ids = tok.Encode(text).size();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Large inputs: correctness only; speed is measured in bench/, not asserted in unit tests.
TEST(TokenizerLargeInputTest, Encodes100KbAndRoundTrips) {
  const std::string text = EnglishText(100 * 1024);
  for (const char* name : {"smollm2", "qwen-style"}) {
    auto tok = Tokenizer::FromHfJson(testing::GoldenDir(name) + "/tokenizer.json");
    ASSERT_TRUE(tok.ok()) << tok.status();
    size_t n = 0;
    const double cold = MillisToEncode(*tok, text, &n);
    const double warm = MillisToEncode(*tok, text, &n);
    std::cout << name << ": 100 KB -> " << n << " tokens, cold " << cold << " ms, warm " << warm
              << " ms\n";
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  }
}

// Long runs of one character class (a classic quadratic trap in BPE pre-tokenizers).
TEST(TokenizerLargeInputTest, PathologicalPiecesRoundTrip) {
  auto tok = Tokenizer::FromHfJson(testing::GoldenDir("qwen-style") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::string cjk;
  while (cjk.size() < 100000) cjk += "的一是不了人我在有他这为之大来以个中上们";
  for (const std::string& text : {std::string(100000, 'a'), std::string(100000, ' '),
                                  std::string(100000, '!'), std::string(50000, '\n') + "x", cjk}) {
    size_t n = 0;
    MillisToEncode(*tok, text, &n);
    EXPECT_GT(n, 0u) << testing::Escaped(text.substr(0, 20));
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  }
}

TEST(TokenizerLargeInputTest, ConcurrentEncodesAgree) {
  auto tok = Tokenizer::FromHfJson(testing::GoldenDir("smollm2") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::string text = EnglishText(20000);
  const std::vector<int32_t> want = tok->Encode(text);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) ok[t] += tok->Encode(text) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 5);
}

}  // namespace
}  // namespace dq
