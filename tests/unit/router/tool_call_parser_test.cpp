#include "router/tool_call_parser.h"

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace dq::router {
namespace {

struct Parsed {
  std::string content;
  std::vector<ChatToolCall> calls;
  bool called = false;
};

// Feeds `pieces` one after another, then Finish; returns everything that came out.
Parsed Parse(ToolCallFormat format, const std::vector<std::string>& pieces, int max_calls = 0) {
  ToolCallParser parser(format, max_calls);
  Parsed p;
  auto take = [&](ToolCallParser::Output out) {
    p.content += out.content;
    for (ChatToolCall& c : out.calls) p.calls.push_back(std::move(c));
  };
  for (const std::string& piece : pieces) take(parser.Feed(piece));
  take(parser.Finish());
  p.called = parser.called();
  return p;
}

Parsed RunWhole(ToolCallFormat format, const std::string& text, int max_calls = 0) {
  return Parse(format, {text}, max_calls);
}

std::vector<std::string> Chars(const std::string& text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

std::vector<std::string> RandomSplit(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = std::uniform_int_distribution<size_t>(0, 7)(rng);
    out.push_back(text.substr(at, n));  // empty pieces too
    at += n;
  }
  return out;
}

// Ids are random, so two runs agree on everything else.
void ExpectSame(const Parsed& a, const Parsed& b, const std::string& what) {
  EXPECT_EQ(a.content, b.content) << what;
  EXPECT_EQ(a.called, b.called) << what;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << what;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << what;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << what;
  }
}

// One piece, one byte at a time, every two-piece split and random splits give the same result.
Parsed RunAllSplits(ToolCallFormat format, const std::string& text, int max_calls = 0) {
  const Parsed whole = RunWhole(format, text, max_calls);
  ExpectSame(whole, Parse(format, Chars(text), max_calls), "one char at a time: " + text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ExpectSame(whole, Parse(format, {text.substr(0, cut), text.substr(cut)}, max_calls),
               "split at " + std::to_string(cut) + ": " + text);
  }
  std::mt19937 rng(static_cast<uint32_t>(text.size()));
  for (int i = 0; i < 20; ++i) {
    ExpectSame(whole, Parse(format, RandomSplit(text, rng), max_calls), "random split: " + text);
  }
  return whole;
}

TEST(ToolCallParserTest, HermesCallsAndContent) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
  const Parsed p = RunAllSplits(ToolCallFormat::kHermes, text);
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, R"({"tz":"CET"})");
  EXPECT_TRUE(p.called);
}

TEST(ToolCallParserTest, HermesTextAfterACallIsContent) {
  const Parsed p = RunAllSplits(
      ToolCallFormat::kHermes,
      "A <b>bold</b> start <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and then "
      "more < text <tool");
  // The space held before the call comes out once more content follows.
  EXPECT_EQ(p.content, "A <b>bold</b> start  and then more < text <tool");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(ToolCallParserTest, HermesUnclosedCallAtTheEndCounts) {
  const Parsed p = RunAllSplits(ToolCallFormat::kHermes,
                                "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}}\n");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, R"({"x":[1,2]})");
}

TEST(ToolCallParserTest, PlainTextStaysWholeWithItsWhitespace) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    const std::string text = "  Hello, world.\n\nNo tools [TOOL here; <tool_call nor {this}.\n ";
    const Parsed p = RunAllSplits(f, text);
    EXPECT_EQ(p.content, text) << ToolCallFormatName(f);
    EXPECT_TRUE(p.calls.empty());
    EXPECT_FALSE(p.called);
  }
}

TEST(ToolCallParserTest, MalformedCallsStayContent) {
  const std::vector<std::string> hermes = {
      "<tool_call>\nnot json\n</tool_call>",
      "<tool_call>{\"arguments\": {}}</tool_call>",                  // no name
      "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",  // empty name
      "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>",  // arguments not an object
      "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>",
      "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}",  // cut off, unparsable
  };
  for (const std::string& text : hermes) {
    const Parsed p = RunAllSplits(ToolCallFormat::kHermes, text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
  const std::vector<std::string> llama = {
      "{\"name\": \"f\", \"parameters\": {}} trailing words",
      "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}",
      "{\"answer\": 42}",
      "<|python_tag|>brave_search.call(query=\"x\")",
  };
  for (const std::string& text : llama) {
    const Parsed p = RunAllSplits(ToolCallFormat::kLlama3Json, text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
  const std::vector<std::string> mistral = {
      "Sure [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}",  // unterminated array
      "[TOOL_CALLS][]",
      "[TOOL_CALLS]f{\"x\": 1}",  // no [ARGS]
      "[TOOL_CALLS]f[ARGS]{\"x\": ",
  };
  for (const std::string& text : mistral) {
    const Parsed p = RunAllSplits(ToolCallFormat::kMistral, text);
    EXPECT_EQ(p.content, text);
    EXPECT_TRUE(p.calls.empty()) << text;
  }
}

TEST(ToolCallParserTest, GoodCallBesideABadOneKeepsBoth) {
  const std::string bad = "<tool_call>{oops}</tool_call>";
  const Parsed p = RunAllSplits(ToolCallFormat::kHermes,
                                "x " + bad + "<tool_call>{\"name\": \"g\"}</tool_call> y");
  EXPECT_EQ(p.content, "x " + bad + " y");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "g");
  EXPECT_EQ(p.calls[0].arguments, "{}");  // no arguments: none
}

TEST(ToolCallParserTest, ArgumentsAsAStringHoldingJson) {
  const Parsed h = RunAllSplits(
      ToolCallFormat::kHermes,
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1, \\\"s\\\": \\\"}\\\"}\"}"
      "</tool_call>");
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].arguments, R"({"x":1,"s":"}"})");
  const Parsed l = RunAllSplits(ToolCallFormat::kLlama3Json,
                                "{\"name\": \"f\", \"parameters\": \"{\\\"y\\\": [true]}\"}");
  ASSERT_EQ(l.calls.size(), 1u);
  EXPECT_EQ(l.calls[0].arguments, R"({"y":[true]})");
}

TEST(ToolCallParserTest, Llama3JsonForms) {
  Parsed p = RunAllSplits(ToolCallFormat::kLlama3Json,
                          "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo"})");

  p = RunAllSplits(ToolCallFormat::kLlama3Json,
                   "<|python_tag|>{\"name\": \"a\", \"arguments\": {\"k\": \"}{;\"}}; "
                   "{\"name\": \"b\", \"parameters\": {}}\n");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, R"({"k":"}{;"})");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParserTest, Llama3TextIsStreamedAtOnce) {
  ToolCallParser parser(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(parser.Feed("<|py").content, "");  // may still become the tag
  EXPECT_EQ(parser.Feed("x is").content, "<|pyx is");
  EXPECT_EQ(parser.Feed(" here").content, " here");
  ToolCallParser call(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(call.Feed("{\"name\": \"f\", ").content, "");  // a call is held until the end
  EXPECT_TRUE(call.Feed("\"parameters\": {}}").calls.empty());
  EXPECT_EQ(call.Finish().calls.size(), 1u);
}

TEST(ToolCallParserTest, MistralForms) {
  Parsed p = RunAllSplits(
      ToolCallFormat::kMistral,
      "Calling now.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
      "\"arguments\": {}}]");
  EXPECT_EQ(p.content, "Calling now.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(p.calls[1].name, "g");

  p = RunAllSplits(ToolCallFormat::kMistral,
                   "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[CALL_ID]"
                   "a1b2c3d4e[ARGS]{}");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{}");
}

TEST(ToolCallParserTest, MaxCallsOneDropsLaterCalls) {
  const std::string hermes =
      "<tool_call>{\"name\": \"first\", \"arguments\": {}}</tool_call>\n"
      "<tool_call>{\"name\": \"second\", \"arguments\": {}}</tool_call>";
  const std::string llama = "{\"name\": \"first\", \"parameters\": {}}; {\"name\": \"second\"}";
  const std::string mistral = "[TOOL_CALLS]first[ARGS]{}[TOOL_CALLS]second[ARGS]{}";
  const std::pair<ToolCallFormat, std::string> cases[] = {{ToolCallFormat::kHermes, hermes},
                                                          {ToolCallFormat::kLlama3Json, llama},
                                                          {ToolCallFormat::kMistral, mistral}};
  for (const auto& [format, text] : cases) {
    const Parsed one = RunAllSplits(format, text, /*max_calls=*/1);
    ASSERT_EQ(one.calls.size(), 1u) << text;
    EXPECT_EQ(one.calls[0].name, "first");
    EXPECT_EQ(one.content, "");
    EXPECT_EQ(RunWhole(format, text).calls.size(), 2u) << text;
  }
}

// Random texts stitched from the formats' fragments (markers, JSON pieces, whitespace, text):
// any split of a text gives the one-piece result, and a text with no call comes back whole.
TEST(ToolCallParserTest, RandomFragmentTextsSplitAnywhereAndLoseNothing) {
  // clang-format off
  const std::vector<std::string> fragments = {
      "<tool_call>", "</tool_call>", "<tool", "_call>", "<|python_tag|>", "<|py", "[TOOL_CALLS]",
      "[TOOL", "[ARGS]", "[CALL_ID]", "{", "}", "[", "]", "\"name\": \"f\"", "\"name\"", ": ",
      ", ", "\"arguments\": ", "\"parameters\": ", "{}", "\"x\"", "1", ";", " ", "\n", "\\",
      "\"", "f", "word", "\xC3\xA9",
      // whole calls of each format, so that some texts hold a few
      "<tool_call>{\"name\": \"f\"}</tool_call>", "{\"name\": \"f\", \"parameters\": {}}",
      "[TOOL_CALLS]f[ARGS]{}", "[TOOL_CALLS][{\"name\": \"f\"}]"};
  // clang-format on
  std::mt19937 rng(7);
  int with_calls = 0;
  int without = 0;
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (int i = 0; i < 400; ++i) {
      std::string text;
      const int n = std::uniform_int_distribution<int>(1, 12)(rng);
      for (int k = 0; k < n; ++k) {
        text += fragments[std::uniform_int_distribution<size_t>(0, fragments.size() - 1)(rng)];
      }
      const Parsed whole = RunWhole(f, text);
      ExpectSame(whole, Parse(f, Chars(text)), "one char at a time: " + text);
      for (int r = 0; r < 3; ++r) ExpectSame(whole, Parse(f, RandomSplit(text, rng)), text);
      if (whole.calls.empty()) {
        EXPECT_EQ(whole.content, text) << ToolCallFormatName(f);
        ++without;
      } else {
        ++with_calls;
      }
    }
  }
  EXPECT_GT(without, 100);
  EXPECT_GT(with_calls, 0);  // the fragments do make calls now and then
}

bool Alphanumeric(const std::string& s) {
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

TEST(ToolCallParserTest, IdsHaveOpenAisShapeAndDiffer) {
  const Parsed h = RunWhole(ToolCallFormat::kHermes,
                            "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": "
                            "\"b\"}</tool_call>");
  ASSERT_EQ(h.calls.size(), 2u);
  for (const ChatToolCall& c : h.calls) {
    ASSERT_EQ(c.id.size(), 29u) << c.id;
    EXPECT_EQ(c.id.substr(0, 5), "call_");
    EXPECT_TRUE(Alphanumeric(c.id.substr(5))) << c.id;
  }
  EXPECT_NE(h.calls[0].id, h.calls[1].id);
  // Mistral's templates refuse any id that is not 9 alphanumerics.
  const Parsed m = RunWhole(ToolCallFormat::kMistral, "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}");
  ASSERT_EQ(m.calls.size(), 2u);
  for (const ChatToolCall& c : m.calls) {
    EXPECT_EQ(c.id.size(), 9u) << c.id;
    EXPECT_TRUE(Alphanumeric(c.id)) << c.id;
  }
  EXPECT_NE(m.calls[0].id, m.calls[1].id);
}

TEST(ToolCallParserTest, FormatNames) {
  for (ToolCallFormat f :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    absl::StatusOr<ToolCallFormat> back = ToolCallFormatNamed(ToolCallFormatName(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, f);
    EXPECT_FALSE(ToolCallMarkers(f).empty());
  }
  absl::StatusOr<ToolCallFormat> bad = ToolCallFormatNamed("qwen");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hermes, llama3_json or mistral"), std::string::npos);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(ToolCallParserTest, DetectsTheFormatOfRealTemplates) {
  const std::filesystem::path src(DQ_SOURCE_DIR);
  const std::pair<const char*, std::optional<ToolCallFormat>> expected[] = {
      {"jinja/templates/Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"jinja/templates/Qwen-QwQ-32B.jinja", ToolCallFormat::kHermes},
      {"jinja/templates/NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
       ToolCallFormat::kHermes},
      {"chat/qwen3_template.jinja", ToolCallFormat::kHermes},
      {"jinja/templates/meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"jinja/templates/meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3Json},
      {"jinja/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"jinja/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"jinja/templates/unsloth-mistral-Devstral-Small-2507.jinja", ToolCallFormat::kMistral},
  };
  std::set<std::string> named;
  for (const auto& [file, format] : expected) {
    const std::string source = ReadFile(src / "tests/golden" / file);
    ASSERT_FALSE(source.empty()) << file;
    EXPECT_EQ(DetectToolCallFormat(source), format) << file;
    named.insert(std::filesystem::path(file).filename().string());
  }
  // Every other template of the corpus describes no format of ours (DeepSeek, Seed's
  // <seed:tool_call>, Functionary, Gemma, Phi, ...): tools need --tool-call-parser there.
  int others = 0;
  for (const auto& dir : {src / "tests/golden/jinja/templates", src / "tests/golden/chat"}) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".jinja" ||
          named.contains(entry.path().filename().string())) {
        continue;
      }
      EXPECT_EQ(DetectToolCallFormat(ReadFile(entry.path())), std::nullopt) << entry.path();
      ++others;
    }
  }
  EXPECT_GE(others, 15);
}

}  // namespace
}  // namespace dq::router
