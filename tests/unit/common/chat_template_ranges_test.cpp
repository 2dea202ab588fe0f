// ChatTemplate::Render's content ranges cover exactly the bytes copied from message content
// (what the tokenizer must not parse special tokens in).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/chat_template.h"
#include "nlohmann/json.hpp"
#include "tests/unit/common/chat_golden.h"

namespace dq {

// Readable ranges in failure messages (found by argument-dependent lookup, so in dq; static
// keeps it to this file).
static void PrintTo(const TextRange& r, std::ostream* os) {
  *os << "[" << r.begin << ", " << r.end << ")";
}

namespace {

using ::testing::ElementsAre;

constexpr std::string_view kSmolLM2DefaultSystem =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n";

// The text of each content range, in order.
std::vector<std::string> Slices(const RenderedChat& r) {
  std::vector<std::string> out;
  for (const TextRange& range : r.content) {
    out.push_back(r.text.substr(range.begin, range.end - range.begin));
  }
  return out;
}

// The text without the bytes of its content ranges: what the template itself wrote.
std::string TemplateBytes(const RenderedChat& r) {
  std::string out;
  size_t at = 0;
  for (const TextRange& range : r.content) {
    out += r.text.substr(at, range.begin - at);
    at = range.end;
  }
  return out + r.text.substr(at);
}

// The ranges are non-empty, sorted, disjoint, non-adjacent and inside the text.
void ExpectCanonical(const RenderedChat& r) {
  size_t prev_end = 0;
  for (size_t i = 0; i < r.content.size(); ++i) {
    const TextRange& range = r.content[i];
    EXPECT_LT(range.begin, range.end) << "range " << i;
    EXPECT_LE(range.end, r.text.size()) << "range " << i;
    if (i > 0) {
      EXPECT_GT(range.begin, prev_end) << "range " << i;
    }
    prev_end = range.end;
  }
}

RenderedChat MustRender(const std::string& name, const std::vector<ChatMessage>& messages,
                        const ChatRenderOptions& opts = {}) {
  absl::StatusOr<RenderedChat> r = chat_golden::Template(name).Render(messages, opts);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  ExpectCanonical(*r);
  return *std::move(r);
}

ChatRenderOptions NoGenerationPrompt() {
  ChatRenderOptions opts;
  opts.add_generation_prompt = false;
  return opts;
}

// Every golden conversation: the text is Render's (HF's) byte for byte, and every range holds
// bytes of some message's content. For the ChatML templates, whose layout does not depend on
// content, the ranges are exactly the non-empty contents and the rest is what the template
// writes for the same conversation with every content emptied.
TEST(ChatTemplateRangesTest, GoldenConversations) {
  const nlohmann::json golden = nlohmann::json::parse(
      chat_golden::ReadFile(std::string(DQ_SOURCE_DIR) + "/tests/golden/chat/chat_golden.json"));
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string tname = c.at("template");
    ChatRenderOptions opts;
    opts.add_generation_prompt = c.at("add_generation_prompt");
    opts.enable_thinking = c.at("enable_thinking").get<bool>();
    const std::vector<ChatMessage> messages = chat_golden::Messages(c.at("messages"));
    const std::string where = tname + " / " + c.at("conversation").get<std::string>();

    const RenderedChat r = MustRender(tname, messages, opts);
    EXPECT_EQ(r.text, c.at("expected").get<std::string>()) << where;
    std::vector<std::string> contents;
    for (const ChatMessage& m : messages) {
      if (!m.content.empty()) contents.push_back(m.content);
    }
    for (const std::string& slice : Slices(r)) {
      bool found = false;
      for (const std::string& content : contents) found |= content.find(slice) != std::string::npos;
      EXPECT_TRUE(found) << where << ": range \"" << slice << "\" is no message's content";
    }
    if (tname != "qwen3") {
      EXPECT_EQ(Slices(r), contents) << where;
      std::vector<ChatMessage> emptied = messages;
      for (ChatMessage& m : emptied) m.content.clear();
      EXPECT_EQ(TemplateBytes(r), MustRender(tname, emptied, opts).text) << where;
    }
    ++checked;
  }
  EXPECT_GE(checked, 90);
}

TEST(ChatTemplateRangesTest, ChatMLRangesAreTheContentBytes) {
  const std::vector<ChatMessage> m = {{"user", "Hi <|im_end|>"}, {"assistant", "Yo"}};
  const RenderedChat chatml = MustRender("chatml", m);
  EXPECT_EQ(chatml.text,
            "<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
            "<|im_start|>assistant\n");
  // "<|im_start|>user\n" is 17 bytes; the user turn is 17 + 13 + 11 = 41 bytes.
  EXPECT_THAT(chatml.content, ElementsAre(TextRange{17, 30}, TextRange{41 + 22, 41 + 24}));

  // SmolLM2's default system prompt is the template's, not content.
  const RenderedChat smol = MustRender("smollm2", m);
  const size_t shift = kSmolLM2DefaultSystem.size();
  EXPECT_EQ(smol.text.substr(0, shift), kSmolLM2DefaultSystem);
  EXPECT_EQ(smol.text.substr(shift), chatml.text);
  EXPECT_THAT(smol.content,
              ElementsAre(TextRange{shift + 17, shift + 30}, TextRange{shift + 63, shift + 65}));
}

TEST(ChatTemplateRangesTest, EmptyContentHasNoRange) {
  const RenderedChat r = MustRender("chatml", {{"system", ""}, {"user", "x"}, {"assistant", ""}});
  EXPECT_THAT(Slices(r), ElementsAre("x"));
}

TEST(ChatTemplateRangesTest, Qwen3ThinkBlockInTheLastAssistantMessage) {
  const RenderedChat r =
      MustRender("qwen3", {{"user", "Q"}, {"assistant", "<think>\nR <|im_end|>\n</think>\n\nA1"}},
                 NoGenerationPrompt());
  EXPECT_EQ(r.text,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR <|im_end|>\n"
            "</think>\n\nA1<|im_end|>\n");
  // The reasoning and the answer are content; the <think> tags and the newlines around them are
  // rewritten by the template (the message's own tags and newlines were stripped).
  EXPECT_THAT(Slices(r), ElementsAre("Q", "R <|im_end|>", "A1"));
  EXPECT_EQ(TemplateBytes(r),
            "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "<|im_end|>\n");
  EXPECT_THAT(r.content, ElementsAre(TextRange{17, 18}, TextRange{59, 71}, TextRange{82, 84}));
}

TEST(ChatTemplateRangesTest, Qwen3DropsEarlierReasoningAndItsRange) {
  ChatRenderOptions opts;
  opts.enable_thinking = false;
  const RenderedChat r = MustRender(
      "qwen3",
      {{"system", "S"}, {"user", "Q1"}, {"assistant", "<think>r</think>\n\nA1"}, {"user", "Q2"}},
      opts);
  EXPECT_EQ(r.text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_THAT(Slices(r), ElementsAre("S", "Q1", "A1", "Q2"));
  // The empty think block of enable_thinking=false is the template's.
  EXPECT_TRUE(TemplateBytes(r).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
}

TEST(ChatTemplateRangesTest, Qwen3ContentWithoutCloseTagIsAllContent) {
  // No "</think>": nothing is split off, so the message's "<think>" stays in its content; the
  // last assistant message still gets the template's (empty) think block.
  const RenderedChat r =
      MustRender("qwen3", {{"user", "Q"}, {"assistant", "x<think>y"}}, NoGenerationPrompt());
  EXPECT_EQ(r.text,
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
            "x<think>y<|im_end|>\n");
  EXPECT_THAT(Slices(r), ElementsAre("Q", "x<think>y"));
}

}  // namespace
}  // namespace dq
