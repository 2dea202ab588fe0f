// Statements, undefined semantics, filters, tests, globals and the render limits.
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/common/jinja_test_util.h"

namespace dq::jinja {
namespace {

using testing::R;
using testing::RenderJson;

TEST(JinjaInterpreter, LoopVariables) {
  EXPECT_EQ(R("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
              "{{ loop.revindex0 }}{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }};"
              "{% endfor %}"),
            "1032103;2121003;3210013;");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.previtem|default('-') }}{{ loop.nextitem|"
              "default('-') }}{{ loop.cycle('a', 'b') }} {% endfor %}"),
            "-2a 13b 2-a ");
}

TEST(JinjaInterpreter, LoopFilterElseBreakContinue) {
  EXPECT_EQ(R("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }} {% endfor %}"),
            "15 35 55 75 95 ");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
              "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "013");
  EXPECT_EQ(R("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
}

TEST(JinjaInterpreter, ScopesAndNamespaces) {
  // A set inside a loop does not leak out, nor carry across iterations: hence namespace().
  EXPECT_EQ(R("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"),
            "0000");
  EXPECT_EQ(R("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
              "{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(R("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");  // if has no scope
  EXPECT_NE(R("{% set d = {} %}{% set d.x = 1 %}").find("non-namespace"), std::string::npos);
}

TEST(JinjaInterpreter, MacrosAndCallBlocks) {
  EXPECT_EQ(R("{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}"
              "{{ m(1) }}|{{ m(1, 2, 3) }}|{{ m(1, c='C') }}"),
            "1BNone|123|1BC");
  EXPECT_EQ(R("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "(1, 2){'k': 3}");
  EXPECT_EQ(R("{% macro w(t) %}<{{ t }}>{{ caller(7) }}</{{ t }}>{% endmacro %}"
              "{% call(n) w('b') %}n={{ n }}{% endcall %}"),
            "<b>n=7</b>");
  EXPECT_EQ(R("{% set s %} A {{ 1 }} {% endset %}[{{ s }}]{% set t | upper %}x{% endset %}{{ t }}"),
            "[ A 1 ]X");
  EXPECT_EQ(R("{% filter trim|upper %}  hi  {% endfilter %}"), "HI");
  EXPECT_EQ(R("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(JinjaInterpreter, UndefinedLikeJinja2) {
  EXPECT_EQ(R("[{{ nope }}]"), "[]");
  EXPECT_EQ(
      R("[{{ d.missing }}{{ d['missing'] }}{{ s.missing }}{{ none.x }}]", R"({"d": {}, "s": "x"})"),
      "[]");
  EXPECT_EQ(R("{{ nope is defined }}{{ nope is undefined }}{{ nope|default('d') }}"
              "{{ ''|default('e', true) }}{{ nope|length }}{{ nope ~ 'x' }}"),
            "FalseTruede0x");
  EXPECT_EQ(R("{% for x in nope %}x{% endfor %}{{ 1 in nope }}"), "False");
  EXPECT_NE(R("{{ nope.attr }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(R("{{ nope + 1 }}").find("ERROR"), std::string::npos);
  EXPECT_NE(R("{{ nope() }}").find("ERROR"), std::string::npos);
  EXPECT_NE(R("{{ nope|tojson }}").find("ERROR"), std::string::npos);
}

TEST(JinjaInterpreter, TheSandboxRefusesMutation) {
  EXPECT_NE(R("{% set l = [] %}{{ l.append(1) }}").find("ERROR"), std::string::npos);
  EXPECT_NE(R("{% set d = {} %}{{ d.update({'a': 1}) }}").find("ERROR"), std::string::npos);
  EXPECT_EQ(R("[{{ ''.__class__ }}]"), "[]");
  EXPECT_NE(R("{{ range(200000)|length }}").find("ERROR"), std::string::npos);
}

TEST(JinjaInterpreter, Filters) {
  EXPECT_EQ(R("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world'|title }}|"
              "{{ 'hELLO'|capitalize }}|{{ [3, 1, 2]|sort|join(',') }}|{{ [1, 2]|first }}"
              "{{ [1, 2]|last }}|{{ 'a-b'|replace('-', '+') }}|{{ [1, 1, 2]|unique|list }}"),
            "a b|a|Hello World|Hello|1,2,3|12|a+b|[1, 2]");
  EXPECT_EQ(R("{{ '3.7'|int }}{{ 'x'|int(5) }}{{ '2'|float }}{{ 2.5|round }}{{ 3.14159|round(2) }}"
              "{{ -3|abs }}{{ [1, 5, 2]|max }}{{ [1, 5, 2]|min }}{{ [1, 2]|sum }}"),
            "352.02.03.143513");
  EXPECT_EQ(R(R"({{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }})",
              R"({"ms": [{"role": "user", "c": "a"}, {"role": "bot", "c": "b"},
                          {"role": "user", "c": "c"}]})"),
            "ac");
  EXPECT_EQ(
      R("{{ [1, 2, 3, 4]|select('even')|list }}{{ [1, none]|reject('none')|list }}"
        "{{ {'b': 1, 'a': 2}|dictsort }}{{ [1, 2, 3]|batch(2)|list }}{{ 'a b c'|wordcount }}"),
      "[2, 4][1][('a', 2), ('b', 1)][[1, 2], [3]]3");
  EXPECT_EQ(R("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}"),
            "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(R("{{ '<a & b>'|e }}"), "&lt;a &amp; b&gt;");
}

TEST(JinjaInterpreter, ToJsonMatchesTransformers) {
  const std::string ctx = R"({"v": {"name": "é\"\n", "n": [1, 2.5, true, null], "e": {}}})";
  EXPECT_EQ(R("{{ v|tojson }}", ctx), R"({"name": "é\"\n", "n": [1, 2.5, true, null], "e": {}})");
  EXPECT_EQ(R("{{ v|tojson(indent=2) }}", ctx),
            "{\n  \"name\": \"é\\\"\\n\",\n  \"n\": [\n    1,\n    2.5,\n    true,\n    null\n"
            "  ],\n  \"e\": {}\n}");
  EXPECT_EQ(
      R("{{ v.n|tojson(separators=(',', ':')) }}{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
        ctx),
      R"([1,2.5,true,null]{"a": 2, "b": 1})");
  EXPECT_EQ(R("{{ '<tag>'|tojson }}"), "\"<tag>\"");  // no HTML escaping, unlike jinja2's own
}

TEST(JinjaInterpreter, StringMethods) {
  EXPECT_EQ(
      R("{{ ' a,b '.strip().split(',') }}{{ 'a b  c'.split() }}{{ 'a,b,c'.rsplit(',', 1) }}"
        "{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('c') }}{{ 'aXa'.replace('a', 'b') }}"
        "{{ 'aaa'.count('a') }}{{ 'x\ny'.splitlines() }}{{ '-'.join(['a', 'b']) }}"),
      "['a', 'b']['a', 'b', 'c']['a,b', 'c']TrueTruebXb3['x', 'y']a-b");
  EXPECT_EQ(R("{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 0) }}{{ d.keys()|list }}"
              "{{ d.values()|list }}",
              R"({"d": {"a": 1}})"),
            "1None0['a'][1]");
}

TEST(JinjaInterpreter, RaiseExceptionAndStrftime) {
  absl::StatusOr<std::string> r = RenderJson("{{ raise_exception('Bad role: ' ~ 'x') }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Bad role: x"), absl::string_view::npos);
  RenderOptions opts;
  opts.strftime_now = [](std::string_view fmt) {
    return std::string("NOW(") + std::string(fmt) + ")";
  };
  EXPECT_EQ(*RenderJson("{{ strftime_now('%d %b %Y') }}", "{}", opts), "NOW(%d %b %Y)");
  // Without an injected clock it uses the real one.
  EXPECT_EQ(RenderJson("{{ strftime_now('%Y')|length }}")->size(), 1u);
}

TEST(JinjaInterpreter, LimitsStopHostileTemplates) {
  RenderOptions opts;
  opts.limits.max_steps = 100000;
  absl::StatusOr<std::string> r =
      RenderJson("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 "{}", opts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  opts = RenderOptions{};
  opts.limits.max_output_bytes = 1 << 16;
  r = RenderJson("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "{}", opts);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = RenderJson("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  r = RenderJson(
      "{% set ns = namespace(x=[]) %}{% for i in range(10000) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  // A namespace holding itself prints without recursing forever.
  r = RenderJson("{% set ns = namespace() %}{% set ns.a = ns %}{{ ns|string|length > 0 }}");
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_NE(R("{{ 'x' * 100000000000 }}").find("ERROR"), std::string::npos);
}

}  // namespace
}  // namespace dq::jinja
