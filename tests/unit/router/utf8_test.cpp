#include "router/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace dq::router {
namespace {

struct Utf8Case {
  std::string name;
  std::string bytes;
  size_t offset;
  std::string what;
};

TEST(Utf8Test, AcceptsWellFormedText) {
  for (const std::string& s : {std::string(""), std::string("plain ascii"),
                               std::string("\xC3\xA9"),          // U+00E9
                               std::string("\xE2\x82\xAC"),      // U+20AC
                               std::string("\xF0\x9F\x98\x80"),  // U+1F600
                               std::string("\xED\x9F\xBF"),      // U+D7FF, just below surrogates
                               std::string("\xEE\x80\x80"),      // U+E000, just above them
                               std::string("\xF4\x8F\xBF\xBF"),  // U+10FFFF, the last code point
                               std::string("a\0b", 3)}) {
    Utf8Problem p;
    EXPECT_TRUE(IsValidUtf8(s, &p)) << "rejected bytes of size " << s.size() << ": " << p.what;
  }
}

TEST(Utf8Test, RejectsEachKindOfIllFormedSequence) {
  const Utf8Case cases[] = {
      {"overlong 2-byte slash", "ab\xC0\xAF", 2, "overlong encoding"},
      {"overlong 2-byte C1", "\xC1\x81", 0, "overlong encoding"},
      {"overlong 3-byte", "\xE0\x80\xAF", 0, "overlong encoding"},
      {"overlong 4-byte", "x\xF0\x80\x80\xAF", 1, "overlong encoding"},
      {"high surrogate", "\xED\xA0\x80", 0, "UTF-16 surrogate"},
      {"low surrogate", "ok\xED\xBF\xBF", 2, "UTF-16 surrogate"},
      {"above U+10FFFF", "\xF4\x90\x80\x80", 0, "code point above U+10FFFF"},
      {"lead F5", "\xF5\x80\x80\x80", 0, "invalid lead byte (code point above U+10FFFF)"},
      {"lead FF", "\xFF", 0, "invalid lead byte (code point above U+10FFFF)"},
      {"stray continuation", "a\x80", 1, "unexpected continuation byte"},
      {"truncated 2-byte at end", "abc\xC3", 3, "truncated sequence"},
      {"truncated 3-byte at end", "\xE2\x82", 0, "truncated sequence"},
      {"truncated 4-byte at end", "\xF0\x9F\x98", 0, "truncated sequence"},
      {"truncated 3-byte before ascii", "\xE2\x82z", 0, "truncated sequence"},
      {"lead byte then ascii", "\xC3(", 0, "truncated sequence"},
  };
  for (const Utf8Case& c : cases) {
    Utf8Problem p;
    EXPECT_FALSE(IsValidUtf8(c.bytes, &p)) << c.name;
    EXPECT_EQ(p.offset, c.offset) << c.name;
    EXPECT_EQ(p.what, c.what) << c.name;
    EXPECT_FALSE(IsValidUtf8(c.bytes)) << c.name << " (without a problem out-parameter)";
  }
}

TEST(Utf8Test, ReplacesOneMaximalSubpartWithOneReplacementCharacter) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(ToValidUtf8("plain"), "plain");
  EXPECT_EQ(ToValidUtf8("\xC3\xA9"), "\xC3\xA9");
  EXPECT_EQ(ToValidUtf8("\xE2\x82z"), r + "z");       // a truncated 3-byte sequence: one
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"), r);          // truncated at the end: one
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), r + r);          // overlong: lead and tail each
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), r + r + r);  // surrogate: three, as Python does
  EXPECT_EQ(ToValidUtf8("a\x80"
                        "b"),
            "a" + r + "b");
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xFF\xFE\xF4\x90\x80\x80\xE0\x80")));
}

TEST(Utf8Test, CountsCodePointsLikePythonLen) {
  EXPECT_EQ(CountCodePoints(""), 0u);
  EXPECT_EQ(CountCodePoints("abc"), 3u);
  EXPECT_EQ(CountCodePoints("h\xC3\xA9llo \xF0\x9F\x98\x80"), 7u);
}

}  // namespace
}  // namespace dq::router
