// ChatTemplate: any model's Jinja template, rendered as transformers renders it.
#include "common/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "tests/unit/common/chat_golden.h"

namespace dq {
namespace {

using chat_golden::Messages;
using chat_golden::ReadFile;
using chat_golden::Template;

std::string GoldenDir() { return chat_golden::Dir(); }

TEST(ChatTemplateTest, MatchesJinjaRenderingsByteForByte) {
  const nlohmann::json golden = nlohmann::json::parse(ReadFile(GoldenDir() + "chat_golden.json"));
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string tname = c.at("template");
    const ChatTemplate t = Template(tname);
    ChatRenderOptions opts;
    opts.add_generation_prompt = c.at("add_generation_prompt");
    opts.enable_thinking = c.at("enable_thinking").get<bool>();
    absl::StatusOr<RenderedChat> got = t.Render(Messages(c.at("messages")), opts);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->text, c.at("expected").get<std::string>())
        << tname << " / " << c.at("conversation").get<std::string>()
        << " gen=" << opts.add_generation_prompt << " think=" << *opts.enable_thinking;
    ++checked;
  }
  EXPECT_GE(checked, 90);
}

// Tools, assistant tool calls (arguments as the JSON string OpenAI clients send) and tool results
// through six real templates, against transformers' renderer (tool_chat_golden.json).
TEST(ChatTemplateTest, ToolConversationsMatchTransformers) {
  // Ordered: templates print the tools in their keys' order.
  const nlohmann::ordered_json golden =
      nlohmann::ordered_json::parse(ReadFile(GoldenDir() + "tool_chat_golden.json"));
  int rendered = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string where = c.at("template").get<std::string>() + " / " +
                              c.at("conversation").get<std::string>() +
                              " gen=" + c.at("add_generation_prompt").dump();
    absl::StatusOr<ChatTemplate> t =
        ChatTemplate::Parse(ReadFile(std::string(DQ_SOURCE_DIR) + "/tests/golden/jinja/templates/" +
                                     c.at("template").get<std::string>()),
                            {c.at("bos_token"), c.at("eos_token")});
    ASSERT_TRUE(t.ok()) << where << ": " << t.status();
    ChatRenderOptions opts;
    opts.add_generation_prompt = c.at("add_generation_prompt");
    opts.tools = c.at("tools");
    opts.kwargs = c.at("kwargs");
    absl::StatusOr<RenderedChat> got =
        t->Render(Messages(nlohmann::json::parse(c.at("messages").dump())), opts);
    if (c.at("expected").is_null()) {
      EXPECT_FALSE(got.ok()) << where << " renders, but transformers refuses it";
      continue;
    }
    ASSERT_TRUE(got.ok()) << where << ": " << got.status();
    EXPECT_EQ(got->text, c.at("expected").get<std::string>()) << where;
    ++rendered;
  }
  EXPECT_GE(rendered, 40);
}

// The model templates of the Jinja corpus (Llama 3, Qwen, Gemma, Mistral, DeepSeek, Phi, ...) all
// parse and render a plain conversation, but those that need variables of their own (a
// firefunction's `functions`, functionary's tool format, the *-tool_use variants' tools).
TEST(ChatTemplateTest, EveryCorpusTemplateRendersAConversation) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(DQ_SOURCE_DIR) +
                                                               "/tests/golden/jinja/templates")) {
    const std::string file = entry.path().filename().string();
    if (file.starts_with("fireworks-ai") || file.starts_with("meetkai") ||
        file.find("tool_use") != std::string::npos) {
      continue;
    }
    absl::StatusOr<ChatTemplate> t =
        ChatTemplate::Parse(ReadFile(entry.path().string()), {"<s>", "</s>"});
    ASSERT_TRUE(t.ok()) << entry.path() << ": " << t.status();
    const std::vector<ChatMessage> m = {{"user", "Hello there"}};
    absl::StatusOr<RenderedChat> r = t->Render(m, {});
    ASSERT_TRUE(r.ok()) << entry.path() << ": " << r.status();
    EXPECT_NE(r->text.find("Hello there"), std::string::npos) << entry.path();
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(ChatTemplateTest, SyntaxErrorsSayWhere) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("hi\n{{ 'unterminated");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(t.status().message(), "chat template:2:")) << t.status();
  EXPECT_FALSE(ChatTemplate::Parse("{% for m in messages %}").ok());
}

TEST(ChatTemplateTest, ConversationsTheTemplateRefusesAreInvalidArgument) {
  const ChatTemplate t = Template("qwen3");
  EXPECT_EQ(t.Render({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  // Mixtral's template raises on turns that do not alternate.
  absl::StatusOr<ChatTemplate> mixtral = ChatTemplate::Parse(
      ReadFile(std::string(DQ_SOURCE_DIR) +
               "/tests/golden/jinja/templates/mistralai-Mixtral-8x7B-Instruct-v0.1.jinja"),
      {"<s>", "</s>"});
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  const std::vector<ChatMessage> twice = {{"user", "a"}, {"user", "b"}};
  absl::StatusOr<RenderedChat> r = mixtral->Render(twice, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("alternate"), std::string::npos) << r.status();
}

TEST(ChatTemplateTest, SpecialTokensAndKwargsReachTheTemplate) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{{ bos_token }}{{ messages[0].content }}{{ greeting | default('none') }}{{ eos_token }}",
      {"<B>", "<E>"});
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions opts;
  const std::vector<ChatMessage> m = {{"user", "x"}};
  EXPECT_EQ(t->Render(m, opts)->text, "<B>xnone<E>");
  opts.kwargs = {{"greeting", "hey"}, {"messages", "not these"}};
  // A kwarg cannot replace a variable the template is given.
  EXPECT_EQ(t->Render(m, opts)->text, "<B>xhey<E>");
}

TEST(ChatTemplateTest, Qwen3GenerationPromptWithThinkingOff) {
  const ChatTemplate t = Template("qwen3");
  ChatRenderOptions opts;
  opts.enable_thinking = false;
  const std::vector<ChatMessage> m = {{"user", "hi"}};
  EXPECT_EQ(t.Render(m, opts)->text,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace dq
