// The interpreter renders the three natively supported templates exactly as ChatTemplate does:
// the same text as transformers (tests/golden/chat/chat_golden.json) and the same content
// ranges, so ChatTemplate can move onto it without changing what the tokenizer sees.
#include "common/jinja/chat.h"
#include "gtest/gtest.h"
#include "tests/unit/common/chat_golden.h"

namespace dq::jinja {
namespace {

std::string TemplateFile(const std::string& name) {
  if (name == "smollm2") return "smollm2_template.jinja";
  if (name == "chatml") return "chatml_template.jinja";
  return "qwen3_template.jinja";
}

TEST(JinjaChat, SameTextAndContentRangesAsTheNativeTemplates) {
  const nlohmann::json golden =
      nlohmann::json::parse(chat_golden::ReadFile(chat_golden::Dir() + "chat_golden.json"));
  int judged = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string name = c.at("template");
    absl::StatusOr<JinjaTemplate> t =
        JinjaTemplate::Parse(chat_golden::ReadFile(chat_golden::Dir() + TemplateFile(name)));
    ASSERT_TRUE(t.ok()) << t.status();
    const std::vector<ChatMessage> messages = chat_golden::Messages(c.at("messages"));
    ChatRenderOptions opts;
    opts.add_generation_prompt = c.at("add_generation_prompt");
    opts.enable_thinking = c.at("enable_thinking");
    const std::string label = name + "/" + c.at("conversation").get<std::string>();

    absl::StatusOr<RenderedChat> got = RenderChat(*t, ChatInputsFor(messages, opts));
    ASSERT_TRUE(got.ok()) << label << ": " << got.status();
    EXPECT_EQ(got->text, c.at("expected").get<std::string>()) << label;
    absl::StatusOr<RenderedChat> native =
        ChatTemplate(chat_golden::KindOf(name)).RenderWithContentRanges(messages, opts);
    ASSERT_TRUE(native.ok()) << label << ": " << native.status();
    ASSERT_EQ(got->content.size(), native->content.size()) << label;
    for (size_t i = 0; i < got->content.size(); ++i) {
      EXPECT_EQ(got->content[i], native->content[i]) << label << " range " << i;
    }
    ++judged;
  }
  EXPECT_GT(judged, 0);
}

TEST(JinjaChat, ToolsAndSpecialTokensReachTheTemplate) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(
      "{{ bos_token }}{% for t in tools %}[{{ t.function.name }}]{% endfor %}"
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
      "{% for c in m.tool_calls or [] %}{{ c.function.arguments|tojson }}{% endfor %}"
      "{% endfor %}{{ eos_token }}");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "<s>hi"},
          {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "f", "arguments": {"x": "<s>"}}}]}])");
  absl::StatusOr<RenderedChat> r = RenderChat(*t, in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->text, R"(<s>[f]<user><s>hi<assistant>{"x": "<s>"}</s>)");
  // User bytes: the tool name, the content and the argument's text; not the template's <s>.
  std::vector<std::string> slices;
  for (const TextRange& range : r->content) {
    slices.push_back(r->text.substr(range.begin, range.end - range.begin));
  }
  EXPECT_EQ(slices, (std::vector<std::string>{"f", "<s>hi", "<s>"}));
}

}  // namespace
}  // namespace dq::jinja
