#include "engine/sampler/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/sampler/sampling_params.h"

namespace dq {
namespace {

// Feeds `pieces` in order and returns (all emitted text, matched stop string or "").
std::pair<std::string, std::string> RunPieces(StopChecker& c,
                                              const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) {
    StopChecker::Result r = c.Feed(p);
    out += r.text;
    if (r.stopped) return {out, r.matched};
  }
  out += c.Flush();
  return {out, ""};
}

TEST(StopCheckerTest, NoStopStringsPassesEverythingThrough) {
  StopChecker c({});
  EXPECT_EQ(c.Feed("hello ").text, "hello ");
  EXPECT_EQ(c.Feed("world").text, "world");
  EXPECT_EQ(c.held_back(), 0u);
  EXPECT_EQ(c.Flush(), "");
}

TEST(StopCheckerTest, StopInsideOnePiece) {
  StopChecker c({"STOP"});
  StopChecker::Result r = c.Feed("abcSTOPdef");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "abc");
  EXPECT_EQ(r.matched, "STOP");
  EXPECT_TRUE(c.stopped());
  // Later pieces produce nothing.
  r = c.Feed("more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(c.Flush(), "");
}

TEST(StopCheckerTest, StopSplitAcrossPieces) {
  StopChecker c({"</answer>"});
  StopChecker::Result r = c.Feed("The result is 4</an");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "The result is 4");  // "</an" could start the stop string
  EXPECT_EQ(c.held_back(), 4u);
  r = c.Feed("sw");
  EXPECT_EQ(r.text, "");
  r = c.Feed("er> trailing");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.matched, "</answer>");
}

TEST(StopCheckerTest, PartialPrefixReleasedWhenItDiverges) {
  StopChecker c({"###"});
  EXPECT_EQ(c.Feed("a#").text, "a");
  EXPECT_EQ(c.Feed("#").text, "");
  StopChecker::Result r = c.Feed("b");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "##b");
  EXPECT_EQ(c.Feed("#").text, "");
  EXPECT_EQ(c.Flush(), "#");  // the sequence ended otherwise: release what was held
}

TEST(StopCheckerTest, OverlappingPrefixes) {
  // "aab" inside "aaab": after "aa" then "a", the tail "aa" is still a candidate.
  StopChecker c({"aab"});
  auto [out, matched] = RunPieces(c, {"a", "a", "a", "b", "c"});
  EXPECT_EQ(out, "a");
  EXPECT_EQ(matched, "aab");
}

TEST(StopCheckerTest, MultipleStopStringsFirstToCompleteWins) {
  {
    StopChecker c({"abcde", "cd"});
    auto [out, matched] = RunPieces(c, {"xxabcdeyy"});
    EXPECT_EQ(out, "xxab");
    EXPECT_EQ(matched, "cd");
  }
  {
    // Same text streamed byte by byte stops at the same place.
    StopChecker c({"abcde", "cd"});
    auto [out, matched] = RunPieces(c, {"x", "x", "a", "b", "c", "d", "e"});
    EXPECT_EQ(out, "xxab");
    EXPECT_EQ(matched, "cd");
  }
  {
    StopChecker c({"\n\n", "User:"});
    auto [out, matched] = RunPieces(c, {"Sure.", " Use", "r: hi\n\n"});
    EXPECT_EQ(out, "Sure. ");
    EXPECT_EQ(matched, "User:");
  }
  {
    // Held back for the longest candidate among several.
    StopChecker c({"xyz", "yzw"});
    StopChecker::Result r = c.Feed("axy");
    EXPECT_EQ(r.text, "a");
    r = c.Feed("zw");
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.matched, "xyz");
  }
}

TEST(StopCheckerTest, ChunkingDoesNotChangeTheOutput) {
  const std::string text = "one two <stop> three <st four";
  const std::vector<std::string> stops = {"<stop>", "<st four"};
  for (size_t chunk = 1; chunk <= text.size(); ++chunk) {
    StopChecker c(stops);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size(); i += chunk) pieces.push_back(text.substr(i, chunk));
    auto [out, matched] = RunPieces(c, pieces);
    EXPECT_EQ(out, "one two ") << "chunk " << chunk;
    EXPECT_EQ(matched, "<stop>") << "chunk " << chunk;
  }
}

TEST(StopCheckerTest, Utf8StopStringsAndIncompleteCharacters) {
  // "世界" is e4 b8 96 e7 95 8c. A piece ending inside a character is held until it completes.
  StopChecker c({"世界"});
  StopChecker::Result r = c.Feed("你好\xe4\xb8");
  EXPECT_EQ(r.text, "你好");
  r = c.Feed("\x96\xe7");
  EXPECT_EQ(r.text, "");  // "世" + start of "界": could be the stop string
  r = c.Feed("\x95\x8c!");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.matched, "世界");

  StopChecker d({"END"});
  r = d.Feed("caf\xc3");  // "é" split after its lead byte
  EXPECT_EQ(r.text, "caf");
  r = d.Feed("\xa9 ok");
  EXPECT_EQ(r.text, "\xc3\xa9 ok");
  r = d.Feed("\xf0\x9f\x8e");  // 3 of 4 bytes of an emoji
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(d.Flush(), "\xf0\x9f\x8e");  // flushed as-is when the sequence ends
}

TEST(StopCheckerTest, EmptyStopStringsIgnored) {
  StopChecker c({"", "x"});
  auto [out, matched] = RunPieces(c, {"abc", "dxe"});
  EXPECT_EQ(out, "abcd");
  EXPECT_EQ(matched, "x");
}

TEST(StopCheckerTest, StopStringsEndingBeforeMinTokensAreText) {
  StopChecker c({"END"}, /*min_tokens=*/3);
  EXPECT_EQ(c.Feed("aEND").text, "aEND");  // piece 1: text
  EXPECT_EQ(c.Feed("EN").text, "");        // piece 2: may become a stop string in piece 3
  StopChecker::Result r = c.Feed("Dz");    // piece 3 completes it
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

// The reference: the stop string occurrence that ends first (then starts first) among those
// whose last byte is in piece min_tokens or later; the text before it, or all of it.
std::pair<std::string, bool> Reference(const std::vector<std::string>& pieces,
                                       const std::vector<std::string>& stops, int min_tokens) {
  std::string text;
  size_t before_min = 0;  // bytes in pieces 1 .. min_tokens - 1
  for (size_t i = 0; i < pieces.size(); ++i) {
    text += pieces[i];
    if (static_cast<int>(i) + 1 < min_tokens) before_min = text.size();
  }
  size_t best_end = std::string::npos, best_pos = 0;
  for (const std::string& s : stops) {
    for (size_t pos = 0; pos + s.size() <= text.size(); ++pos) {
      const size_t end = pos + s.size();
      if (text.compare(pos, s.size(), s) != 0 || end <= before_min) continue;
      if (end < best_end || (end == best_end && pos < best_pos)) {
        best_end = end;
        best_pos = pos;
      }
    }
  }
  if (best_end == std::string::npos) return {text, false};
  return {text.substr(0, best_pos), true};
}

TEST(StopCheckerTest, MinTokensMatchesABruteForceReference) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  auto word = [&](int lo, int hi) {
    std::string w;
    for (int n = std::uniform_int_distribution<int>(lo, hi)(rng); n > 0; --n) w += "ab"[rng() % 2];
    return w;
  };
  int stopped = 0, cases = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::string> stops, pieces;
    for (int i = 1 + static_cast<int>(rng() % 3); i > 0; --i) stops.push_back(word(1, 4));
    for (int i = 1 + static_cast<int>(rng() % 8); i > 0; --i) pieces.push_back(word(0, 3));
    const int min_tokens = static_cast<int>(rng() % 10);
    StopChecker c(stops, min_tokens);
    std::string out;
    bool got_stop = false;
    for (const std::string& p : pieces) {
      StopChecker::Result r = c.Feed(p);
      out += r.text;
      if (r.stopped) {
        got_stop = true;
        break;
      }
    }
    if (!got_stop) out += c.Flush();
    const auto [want, want_stop] = Reference(pieces, stops, min_tokens);
    ASSERT_EQ(got_stop, want_stop)
        << "min_tokens " << min_tokens << " pieces " << ::testing::PrintToString(pieces)
        << " stops " << ::testing::PrintToString(stops);
    ASSERT_EQ(out, want) << "min_tokens " << min_tokens << " pieces "
                         << ::testing::PrintToString(pieces);
    stopped += got_stop;
    ++cases;
  }
  EXPECT_GT(stopped, 0);
  EXPECT_GT(cases - stopped, 0);
}

TEST(FinishReasonTest, Names) {
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace dq
