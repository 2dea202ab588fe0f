// The chat layer over the interpreter: the variables transformers passes reach the template, and
// only the template's own bytes are outside the content ranges. (ChatTemplate's tests check
// whole renderings against transformers.)
#include "common/jinja/chat.h"
#include "gtest/gtest.h"

namespace dq::jinja {
namespace {

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
