// Python semantics of values: str()/repr(), ==, ordering, truthiness, indexing by code point.
#include "common/jinja/value.h"
#include "gtest/gtest.h"
#include "tests/unit/common/jinja_test_util.h"

namespace dq::jinja {
namespace {

using testing::R;

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(0.1), "0.1");
  EXPECT_EQ(FloatRepr(2.5e-5), "2.5e-05");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(1.0 / 3), "0.3333333333333333");
}

TEST(JinjaValue, PrintsLikePythonStr) {
  EXPECT_EQ(R("{{ none }} {{ true }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }}"),
            "None True 1.5 2.0 3 2");
  EXPECT_EQ(R(R"({{ ['a', "it's", 1, none, {'k': [true]}] }})"),
            R"(['a', "it's", 1, None, {'k': [True]}])");
  EXPECT_EQ(R("{{ {'a': 1}.items()|list }}"), "[('a', 1)]");
  EXPECT_EQ(R("{{ (1,) }}{{ () }}"), "(1,)()");
}

TEST(JinjaValue, EqualityAndOrder) {
  EXPECT_EQ(R("{{ 1 == 1.0 }}{{ 1 == true }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 'a' == 1 }}{{ none == false }}{{ (1, 2) == [1, 2] }}"), "FalseFalseFalse");
  EXPECT_EQ(R("{{ 'b' > 'a' }}{{ [1, 2] < [1, 3] }}"), "TrueTrue");
  EXPECT_NE(R("{{ 1 < 'a' }}").find("ERROR"), std::string::npos);
}

TEST(JinjaValue, Truthiness) {
  EXPECT_EQ(R("{% for v in [0, 0.0, '', [], {}, none, false, 1, 'x', [0]] %}"
              "{{ 'T' if v else 'F' }}{% endfor %}"),
            "FFFFFFFTTT");
  EXPECT_EQ(R("{{ 'T' if undefined_thing else 'F' }}"), "F");
}

TEST(JinjaValue, StringsIndexByCodePoint) {
  const std::string ctx = R"({"s": "héllo 世界"})";
  EXPECT_EQ(R("{{ s|length }} {{ s[1] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }}", ctx),
            "8 é 界 él 界世 olléh");
  EXPECT_EQ(R("{{ s.find('l') }} {{ s.upper() }} {{ s|title }}", ctx), "2 HÉLLO 世界 Héllo 世界");
}

TEST(JinjaValue, ListsAndDicts) {
  EXPECT_EQ(R("{{ [1, 2, 3][-1] }}{{ [1, 2, 3][1:] }}{{ [1, 2, 3][5] }}|"), "3[2, 3]|");
  EXPECT_EQ(R("{{ 2 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 'ell' in 'hello' }}{{ 3 not in [3] }}"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(R("{{ [1] + [2] }}{{ 'ab' * 2 }}{{ [0] * 3 }}"), "[1, 2]abab[0, 0, 0]");
  // getattr before getitem for d.items, getitem first for d['items'].
  EXPECT_EQ(R(R"({{ d['items'] }}{{ d.items()|list }})", R"({"d": {"items": 5}})"),
            "5[('items', 5)]");
}

TEST(JinjaValue, PercentFormatting) {
  EXPECT_EQ(R("{{ '%s=%d (%.2f) %5s|%-3s|%03d %%' % ('a', 7, 3.14159, 'r', 'l', 5) }}"),
            "a=7 (3.14)     r|l  |005 %");
  EXPECT_EQ(R("{{ '%(x)s!' % {'x': 1} }}{{ '%s'|format('f') }}"), "1!f");
  EXPECT_NE(R("{{ 'abc' % 5 }}").find("ERROR"), std::string::npos);
}

}  // namespace
}  // namespace dq::jinja
