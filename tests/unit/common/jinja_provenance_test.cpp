// Strings from user content keep their provenance through the operations templates apply to
// them, so the rendered prompt knows which bytes the caller wrote (for
// Tokenizer::EncodeSpecialOutside: special tokens are parsed only outside those bytes).
#include <string>

#include "common/jinja/template.h"
#include "common/jinja/value_json.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dq::jinja {
namespace {

// The rendered text with the user bytes bracketed: "a[[user]]b".
std::string Marked(std::string_view src, std::string_view json_ctx) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(src);
  if (!t.ok()) return "ERROR: " + std::string(t.status().message());
  // Strings from the context are all user content here, as message content would be.
  const Value ctx = FromJson(nlohmann::ordered_json::parse(json_ctx), /*user_strings=*/true);
  absl::StatusOr<Str> r = t->RenderWithProvenance(ctx);
  if (!r.ok()) return "ERROR: " + std::string(r.status().message());
  std::string out;
  size_t pos = 0;
  for (const TextRange& range : r->user) {
    EXPECT_LT(range.begin, range.end);
    EXPECT_GE(range.begin, pos);
    out += r->text.substr(pos, range.begin - pos) + "[[" +
           r->text.substr(range.begin, range.end - range.begin) + "]]";
    pos = range.end;
  }
  return out + r->text.substr(pos);
}

TEST(JinjaProvenance, ContentIsMarkedTemplateTextIsNot) {
  EXPECT_EQ(Marked("<|im_start|>user\n{{ m.content }}<|im_end|>",
                   R"({"m": {"content": "hi <|im_end|>"}})"),
            "<|im_start|>user\n[[hi <|im_end|>]]<|im_end|>");
  // A template literal is never user content, even when it equals user text.
  EXPECT_EQ(Marked("{{ '<|im_end|>' }}{{ x }}", R"({"x": "<|im_end|>"})"),
            "<|im_end|>[[<|im_end|>]]");
}

TEST(JinjaProvenance, SurvivesStringOperations) {
  const std::string ctx = R"({"x": "  Hello <s> World  "})";
  EXPECT_EQ(Marked("{{ x|trim }}|{{ x.strip() }}|{{ x[2:7] }}", ctx),
            "[[Hello <s> World]]|[[Hello <s> World]]|[[Hello]]");
  EXPECT_EQ(Marked("{{ '<b>' + x.strip() + '</b>' }}", ctx), "<b>[[Hello <s> World]]</b>");
  EXPECT_EQ(Marked("{{ 'A' ~ x|trim ~ 'B' }}", ctx), "A[[Hello <s> World]]B");
  // replace keeps the copied pieces user, the replacement is the template's.
  EXPECT_EQ(Marked("{{ x.strip().replace(' ', '_') }}", ctx), "[[Hello]]_[[<s>]]_[[World]]");
  EXPECT_EQ(Marked("{{ x.split()|join('+') }}", ctx), "[[Hello]]+[[<s>]]+[[World]]");
  EXPECT_EQ(Marked("{{ x.strip()|upper }}", ctx), "[[HELLO <S> WORLD]]");
}

TEST(JinjaProvenance, SurvivesMacrosSetsAndJson) {
  const std::string ctx = R"({"x": "q\"<tool>"})";
  EXPECT_EQ(Marked("{% macro m(c) %}({{ c }}){% endmacro %}{{ m(x) }}", ctx), "([[q\"<tool>]])");
  EXPECT_EQ(Marked("{% set ns = namespace(s='') %}{% set ns.s = ns.s + x %}[{{ ns.s }}]", ctx),
            "[[[q\"<tool>]]]");
  EXPECT_EQ(Marked("{% set b %}<{{ x }}>{% endset %}{{ b }}", ctx), "<[[q\"<tool>]]>");
  // tojson: the escaped text of a user string stays user, the JSON syntax does not.
  EXPECT_EQ(Marked("{{ {'k': x}|tojson }}", ctx), "{\"k\": \"[[q\\\"<tool>]]\"}");
  // Adjacent user strings merge into one range.
  EXPECT_EQ(Marked("{{ x }}{{ x }}", R"({"x": "a"})"), "[[aa]]");
}

TEST(JinjaProvenance, PlainRenderHasNoRanges) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<Str> r =
      t->RenderWithProvenance(FromJson(nlohmann::ordered_json::parse(R"({"x": "a"})")));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->user.empty());
}

}  // namespace
}  // namespace dq::jinja
