// Lexing, parsing and whitespace control, as jinja2 does them with trim_blocks and
// lstrip_blocks (transformers' settings).
#include "gtest/gtest.h"
#include "tests/unit/common/jinja_test_util.h"

namespace dq::jinja {
namespace {

using testing::R;

TEST(JinjaSyntax, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(R("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  // Not after an expression.
  EXPECT_EQ(R("{{ 1 }}\n{{ 2 }}"), "1\n2");
}

TEST(JinjaSyntax, LstripBlocksStripsIndentBeforeABlockTag) {
  EXPECT_EQ(R("a\n    {% if true %}\n    x\n    {% endif %}\nb"), "a\n    x\nb");
  // Only when the tag starts the line, and never before {{.
  EXPECT_EQ(R("a  {% if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(R("  {{ 1 }}"), "  1");
  // {%+ turns it off.
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(JinjaSyntax, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(R("a \n\t {%- if true -%} \n\n b {%- endif %}"), "ab");
  EXPECT_EQ(R("x  {{- 1 -}}  y"), "x1y");
  EXPECT_EQ(R("a\n{#- comment -#}\nb"), "ab");
}

TEST(JinjaSyntax, OneTrailingNewlineIsDropped) {
  EXPECT_EQ(R("hi\n"), "hi");
  EXPECT_EQ(R("hi\n\n"), "hi\n");
  EXPECT_EQ(R("a\r\nb\r"), "a\nb");
}

TEST(JinjaSyntax, CommentsAndRaw) {
  EXPECT_EQ(R("a{# {{ x }} #}b"), "ab");
  EXPECT_EQ(R("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(JinjaSyntax, StringLiteralsUsePythonEscapes) {
  EXPECT_EQ(R(R"({{ 'a\nb\t\'c\' \x41\u00e9 \\' }})"), "a\nb\t'c' A\xC3\xA9 \\");
  EXPECT_EQ(R(R"({{ "x" 'y' }})"), "xy");  // adjacent literals concatenate
  EXPECT_EQ(R("{{ '\\d' }}"), "\\d");      // unknown escapes stay
}

TEST(JinjaSyntax, Precedence) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }}"), "7");
  EXPECT_EQ(R("{{ 2 ** 3 ** 2 }}"), "64");                   // jinja2's ** is left-associative
  EXPECT_EQ(R("{{ 'a' ~ 1 + 2 }}").substr(0, 6), "ERROR:");  // ~ binds tighter than +
  EXPECT_EQ(R("{{ -2|abs }}"), "2");
  EXPECT_EQ(R("{{ not 1 == 2 }}"), "True");
  EXPECT_EQ(R("{{ 1 if false else 2 if true else 3 }}"), "2");
  EXPECT_EQ(R("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}"), "TrueFalse");
}

TEST(JinjaSyntax, ErrorsCarryLineAndColumn) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse("line one\n{% if %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("template:2:"), absl::string_view::npos)
      << t.status().message();
  EXPECT_FALSE(JinjaTemplate::Parse("{% for x in y %}").ok());
  EXPECT_FALSE(JinjaTemplate::Parse("{{ 'unterminated }}").ok());
  EXPECT_FALSE(JinjaTemplate::Parse("{% endif %}").ok());
  EXPECT_FALSE(JinjaTemplate::Parse("{% include 'x' %}").ok());
  EXPECT_FALSE(JinjaTemplate::Parse("{{ f(*args) }}").ok());
  const std::string r = R("ok\n\n  {{ raise_exception('boom') }}");
  EXPECT_NE(r.find("template:3:"), std::string::npos) << r;
  EXPECT_NE(r.find("boom"), std::string::npos) << r;
}

TEST(JinjaSyntax, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(JinjaTemplate::Parse(deep).ok());
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(JinjaTemplate::Parse(ifs).ok());
}

}  // namespace
}  // namespace dq::jinja
