#include "common/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"
#include "tests/unit/common/chat_golden.h"

namespace dq {
namespace {

using chat_golden::Messages;
using chat_golden::ReadFile;

std::string GoldenDir() { return chat_golden::Dir(); }

TEST(ChatTemplateTest, RecognisesTheGoldenTemplateFiles) {
  for (const std::string name : {"smollm2", "chatml", "qwen3"}) {
    const std::string source = ReadFile(GoldenDir() + name + "_template.jinja");
    absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTemplateString(source);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->kind(), chat_golden::KindOf(name)) << name;
    // The embedded reference is the published text, byte for byte.
    EXPECT_EQ(ChatTemplate::ReferenceSource(chat_golden::KindOf(name)), source) << name;
  }
}

TEST(ChatTemplateTest, MatchesJinjaRenderingsByteForByte) {
  const nlohmann::json golden = nlohmann::json::parse(ReadFile(GoldenDir() + "chat_golden.json"));
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string tname = c.at("template");
    ChatTemplate t(chat_golden::KindOf(tname));
    ChatRenderOptions opts;
    opts.add_generation_prompt = c.at("add_generation_prompt");
    opts.enable_thinking = c.at("enable_thinking");
    const std::vector<ChatMessage> messages = Messages(c.at("messages"));
    absl::StatusOr<std::string> got = t.Render(messages, opts);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.at("expected").get<std::string>())
        << tname << " / " << c.at("conversation").get<std::string>()
        << " gen=" << opts.add_generation_prompt << " think=" << opts.enable_thinking;
    ++checked;
  }
  EXPECT_GE(checked, 90);
}

TEST(ChatTemplateTest, RecognitionIgnoresSpellingThatJinjaIgnores) {
  const std::string smol(ChatTemplate::ReferenceSource(ChatTemplate::Kind::kChatMLSmolLM2));
  // Escaped newlines instead of raw ones, double quotes, attribute access, extra whitespace in
  // tags, a trailing newline (Jinja drops one).
  std::string variant = absl::StrReplaceAll(smol, {{"\n", "\\n"}});
  variant = absl::StrReplaceAll(
      variant, {{"{{'<|im_start|>' + message['role']", "{{ \"<|im_start|>\" + message.role"},
                {"{% endfor %}", "{%   endfor\t%}"}});
  variant += "\n";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTemplateString(variant);
  ASSERT_TRUE(t.ok()) << t.status() << "\n" << variant;
  EXPECT_EQ(t->kind(), ChatTemplate::Kind::kChatMLSmolLM2);

  // Block tags on their own indented lines: trim_blocks/lstrip_blocks remove that whitespace.
  const std::string chatml_multiline =
      "{% for message in messages %}\n"
      "  {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n' -}}\n"
      "{% endfor %}\n"
      "{% if add_generation_prompt %}\n"
      "  {{- '<|im_start|>assistant\\n' -}}\n"
      "{% endif %}\n";
  t = ChatTemplate::FromTemplateString(chatml_multiline);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->kind(), ChatTemplate::Kind::kChatML);
}

TEST(ChatTemplateTest, RejectsTemplatesThatRenderDifferently) {
  // Output text between tags changes the rendering: not ChatML any more.
  const std::string chatml_with_newlines =
      "{% for message in messages %}\n"
      "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' "
      "}}\n"
      "{% endfor %}";
  EXPECT_FALSE(ChatTemplate::FromTemplateString(chatml_with_newlines).ok());
  // Another default system prompt is another template.
  std::string other_default = absl::StrReplaceAll(
      std::string(ChatTemplate::ReferenceSource(ChatTemplate::Kind::kChatMLSmolLM2)),
      {{"named SmolLM", "named Bob"}});
  EXPECT_FALSE(ChatTemplate::FromTemplateString(other_default).ok());
  // Qwen3 without the enable_thinking switch (like Qwen3-2507's) is not Qwen3's template.
  std::string qwen_no_switch =
      absl::StrReplaceAll(std::string(ChatTemplate::ReferenceSource(ChatTemplate::Kind::kQwen3)),
                          {{"enable_thinking is defined and enable_thinking is false", "false"}});
  EXPECT_FALSE(ChatTemplate::FromTemplateString(qwen_no_switch).ok());
}

TEST(ChatTemplateTest, UnknownTemplateErrorSaysWhatIsSupported) {
  const std::string llama3 =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{{ content }}{% endfor %}";
  absl::StatusOr<ChatTemplate> t = ChatTemplate::FromTemplateString(llama3);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(t.status().message());
  EXPECT_NE(msg.find("unsupported chat template (first 80 chars: \"{% set loop_messages"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("supported: chatml (SmolLM2), chatml, qwen3"), std::string::npos) << msg;
  EXPECT_FALSE(ChatTemplate::FromTemplateString("").ok());
  EXPECT_FALSE(ChatTemplate::FromTemplateString("{{ 'unterminated").ok());
}

TEST(ChatTemplateTest, FromName) {
  EXPECT_EQ(ChatTemplate::FromName("qwen3")->kind(), ChatTemplate::Kind::kQwen3);
  EXPECT_EQ(ChatTemplate::FromName("chatml")->kind(), ChatTemplate::Kind::kChatML);
  EXPECT_EQ(ChatTemplate::FromName("chatml-smollm2")->kind(), ChatTemplate::Kind::kChatMLSmolLM2);
  absl::StatusOr<ChatTemplate> bad = ChatTemplate::FromName("llama3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chatml-smollm2, chatml, qwen3"), std::string::npos);
}

TEST(ChatTemplateTest, RejectsUnsupportedConversations) {
  const ChatRenderOptions opts;
  for (ChatTemplate::Kind kind : {ChatTemplate::Kind::kChatMLSmolLM2, ChatTemplate::Kind::kChatML,
                                  ChatTemplate::Kind::kQwen3}) {
    ChatTemplate t(kind);
    EXPECT_FALSE(t.Render({}, opts).ok());
    const std::vector<ChatMessage> tool = {{"user", "q"}, {"tool", "42"}};
    absl::StatusOr<std::string> r = t.Render(tool, opts);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("messages[1] has role \"tool\""), std::string::npos)
        << r.status();
    const std::vector<ChatMessage> late_system = {{"user", "q"}, {"system", "s"}};
    r = t.Render(late_system, opts);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("messages[1] is a system message"), std::string::npos)
        << r.status();
  }
}

TEST(ChatTemplateTest, Qwen3GenerationPromptWithThinkingOff) {
  ChatTemplate t(ChatTemplate::Kind::kQwen3);
  ChatRenderOptions opts;
  opts.enable_thinking = false;
  const std::vector<ChatMessage> m = {{"user", "hi"}};
  EXPECT_EQ(*t.Render(m, opts),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace dq
