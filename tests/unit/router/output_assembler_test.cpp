#include "router/output_assembler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;

Tokenizer LoadTokenizer() {
  auto t = Tokenizer::FromHfJson(std::string(DQ_SOURCE_DIR) +
                                 "/tests/golden/tokenizer/qwen-style/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tokenizer();
}

// Feeds `text`'s tokens one by one; returns everything sent and whether a stop string matched.
struct Fed {
  std::string text;
  bool stopped = false;
  int tokens = 0;
  std::string matched;
};
Fed FeedAll(const Tokenizer& tok, const std::string& text, std::vector<std::string> stops,
            int min_tokens = 0) {
  OutputAssembler out(tok, std::move(stops), {}, min_tokens);
  Fed f;
  for (int32_t id : tok.Encode(text)) {
    Delta d;
    f.stopped = out.Feed(id, nullptr, &d);
    f.text += d.text;
    if (f.stopped) break;
  }
  if (!f.stopped) {
    Delta d;
    f.stopped = out.Finish(&d);
    f.text += d.text;
  }
  f.tokens = out.tokens();
  f.matched = out.matched_stop();
  return f;
}

TEST(OutputAssemblerTest, WithoutStopStringsTheDeltasJoinToTheDecodedText) {
  const Tokenizer tok = LoadTokenizer();
  const std::string text = "Hello, world! Ünïcödé 🙂 and numbers 12345.";
  const Fed f = FeedAll(tok, text, {});
  EXPECT_EQ(f.text, text);
  EXPECT_FALSE(f.stopped);
  EXPECT_EQ(f.tokens, static_cast<int>(tok.Encode(text).size()));
}

TEST(OutputAssemblerTest, CutsAtAStopStringAndStopsCountingTokensThere) {
  const Tokenizer tok = LoadTokenizer();
  const Fed f = FeedAll(tok, "The answer is 42.\nQuestion: what next?", {"\nQuestion:"});
  EXPECT_TRUE(f.stopped);
  EXPECT_EQ(f.text, "The answer is 42.");
  EXPECT_EQ(f.matched, "\nQuestion:");
  EXPECT_LT(f.tokens,
            static_cast<int>(tok.Encode("The answer is 42.\nQuestion: what next?").size()));
}

// min_tokens (vLLM's): a stop string that ends before the min_tokens-th token is text; the
// next occurrence, past it, stops.
TEST(OutputAssemblerTest, AStopStringBeforeMinTokensIsText) {
  const Tokenizer tok = LoadTokenizer();
  const std::string text = "a.b.c.d.e.f.g.h.";
  const int first_dot_end = static_cast<int>(tok.Encode("a.").size());
  const Fed plain = FeedAll(tok, text, {"."});
  EXPECT_EQ(plain.text, "a");
  const int all = static_cast<int>(tok.Encode(text).size());
  ASSERT_GT(all, first_dot_end + 2);
  const Fed held = FeedAll(tok, text, {"."}, first_dot_end + 2);
  EXPECT_TRUE(held.stopped);
  EXPECT_GE(held.tokens, first_dot_end + 2) << held.text;
  EXPECT_LT(held.text.size(), text.size());
  EXPECT_EQ(held.text.rfind("a.", 0), 0u) << held.text;  // the first "." stayed text
}

TEST(OutputAssemblerTest, HoldsBackAPartialStopMatchAndReleasesItWhenItDoesNotComplete) {
  const Tokenizer tok = LoadTokenizer();
  OutputAssembler out(tok, {"STOP NOW"});
  std::string sent;
  for (int32_t id : tok.Encode("go STOP")) {
    Delta d;
    ASSERT_FALSE(out.Feed(id, nullptr, &d));
    sent += d.text;
  }
  EXPECT_EQ(sent, "go ");  // "STOP" may still become "STOP NOW"
  Delta tail;
  EXPECT_FALSE(out.Finish(&tail));
  EXPECT_EQ(sent + tail.text, "go STOP");
}

TEST(OutputAssemblerTest, LogprobsGetTokenStringsAndEveryTokenIsReported) {
  const Tokenizer tok = LoadTokenizer();
  const std::vector<int32_t> ids = tok.Encode("Hi there");
  ASSERT_GE(ids.size(), 2u);
  OutputAssembler out(tok, {});
  Delta d;
  for (int32_t id : ids) {
    v1::PositionLogprobs lp;
    lp.mutable_chosen()->set_token_id(id);
    lp.mutable_chosen()->set_logprob(-0.5f);
    lp.add_top()->set_token_id(ids[0]);
    out.Feed(id, &lp, &d);
  }
  ASSERT_EQ(d.token_ids, ids);
  ASSERT_EQ(d.logprobs.size(), ids.size());
  EXPECT_EQ(d.logprobs[1].chosen().token(), std::string(tok.TokenBytes(ids[1])));
  EXPECT_EQ(d.logprobs[1].top(0).token(), "Hi");
  const TokenLogprobs t = ToTokenLogprobs(tok, d.logprobs[1]);
  EXPECT_EQ(t.bytes, std::string(tok.TokenBytes(ids[1])));
  EXPECT_FLOAT_EQ(*t.logprob, -0.5f);
  ASSERT_EQ(t.top.size(), 1u);
  EXPECT_EQ(t.top[0].bytes, "Hi");
}

TEST(OutputAssemblerTest, HalfACharacterTokenStringIsValidUtf8ButKeepsItsRawBytes) {
  const Tokenizer tok = LoadTokenizer();
  // Byte-level BPE writes byte 0xC3 (the first half of "é") as the symbol "Ã".
  const std::optional<int32_t> half = tok.TokenToId("\xC3\x83");
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(tok.TokenBytes(*half), "\xC3");
  EXPECT_EQ(TokenString(tok, *half), "\xEF\xBF\xBD");  // U+FFFD: proto strings must be UTF-8
  v1::PositionLogprobs lp;
  lp.mutable_chosen()->set_token_id(*half);
  EXPECT_EQ(ToTokenLogprobs(tok, lp).bytes, "\xC3");
}

TEST(PromptTokenLogprobsTest, OnePerPromptTokenTheFirstWithoutALogprob) {
  const Tokenizer tok = LoadTokenizer();
  const std::vector<int32_t> prompt = tok.Encode("one two three");
  ASSERT_EQ(prompt.size(), 3u);
  std::vector<v1::PositionLogprobs> lps(2);
  lps[0].mutable_chosen()->set_token_id(prompt[1]);
  lps[0].mutable_chosen()->set_logprob(-1.0f);
  lps[1].mutable_chosen()->set_token_id(prompt[2]);
  lps[1].mutable_chosen()->set_logprob(-2.0f);
  const std::vector<TokenLogprobs> out = PromptTokenLogprobs(tok, prompt, lps);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].bytes, "one");
  EXPECT_FALSE(out[0].logprob.has_value());
  EXPECT_EQ(out[1].bytes, " two");
  EXPECT_FLOAT_EQ(*out[1].logprob, -1.0f);
  EXPECT_FLOAT_EQ(*out[2].logprob, -2.0f);
}

}  // namespace
}  // namespace dq::router
