// The accepted forms of request bodies and what they parse to.
#include "router/openai_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dq::router {
namespace {

ParseOptions Options() {
  ParseOptions o;
  o.served_models = {"m", "m2"};
  o.vocab_size = 1000;
  return o;
}

ChatCompletionRequest ParseChat(const std::string& body, const ParseOptions& o = Options()) {
  auto r = ParseChatCompletionRequest(body, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : ChatCompletionRequest{};
}

CompletionRequest ParseText(const std::string& body, const ParseOptions& o = Options()) {
  auto r = ParseCompletionRequest(body, o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value() : CompletionRequest{};
}

TEST(OpenAiRequestTest, MinimalChatGetsOpenAiDefaults) {
  const ChatCompletionRequest r =
      ParseChat(R"({"model": "m2", "messages": [{"role": "user", "content": "Hello"}]})");
  EXPECT_EQ(r.model, "m2");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "Hello");
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.sampling.max_tokens.has_value());  // the rest of the context
  EXPECT_FALSE(r.sampling.seed.has_value());
  EXPECT_TRUE(r.sampling.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.logprobs);
  EXPECT_FALSE(r.enable_thinking.has_value());
}

TEST(OpenAiRequestTest, ModelMayBeOmittedAndAnyNameServesWhenNoneAreListed) {
  EXPECT_EQ(ParseChat(R"({"messages": [{"role": "user", "content": "x"}]})").model, "m");
  ParseOptions open;
  EXPECT_EQ(
      ParseChat(R"({"model": "anything", "messages": [{"role": "user", "content": "x"}]})", open)
          .model,
      "anything");
  EXPECT_EQ(ParseText(R"({"prompt": "x"})", open).model, "");
}

TEST(OpenAiRequestTest, MessageForms) {
  const ChatCompletionRequest r = ParseChat(R"({"model": "m", "messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "part one"},
                                   {"type": "text", "text": "part two"}], "name": "ann"},
      {"role": "assistant", "content": null},
      {"role": "assistant"},
      {"role": "user", "content": ""},
      {"role": "user", "content": []},
      {"role": "system", "content": "caf\u00e9 \ud83d\ude00"}]})");
  ASSERT_EQ(r.messages.size(), 7u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is OpenAI's newer name for system
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].content, "part one\npart two");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "");
  EXPECT_EQ(r.messages[4].content, "");
  EXPECT_EQ(r.messages[5].content, "");
  EXPECT_EQ(r.messages[6].content, "caf\xC3\xA9 \xF0\x9F\x98\x80");  // escapes decode to UTF-8
}

TEST(OpenAiRequestTest, EverySamplingField) {
  const ChatCompletionRequest r = ParseChat(R"({"model": "m",
      "messages": [{"role": "user", "content": "x"}],
      "temperature": 0, "top_p": 0.5, "top_k": 40, "min_p": 0.05, "presence_penalty": -2,
      "frequency_penalty": 2, "repetition_penalty": 1.1, "seed": 1234, "max_tokens": 64,
      "stop": ["\n\n", "END"], "stop_token_ids": [0, 999], "ignore_eos": true, "user": "u-1",
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": true,
      "top_logprobs": 20, "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.presence_penalty, -2.0f);
  EXPECT_EQ(r.sampling.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.sampling.seed, uint64_t{1234});
  EXPECT_EQ(r.sampling.max_tokens, 64);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_EQ(r.sampling.stop_token_ids, (std::vector<int32_t>{0, 999}));
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.user, "u-1");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 20);
  EXPECT_EQ(r.enable_thinking, false);
}

TEST(OpenAiRequestTest, LenientNumberAndNullForms) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  // Python clients send 16.0 for integers; integers are fine where numbers are expected.
  auto r = ParseChat(R"({"model": "m", )" + msgs +
                     R"(, "max_tokens": 16.0, "temperature": 1, "top_k": -1, "seed": -1})");
  EXPECT_EQ(r.sampling.max_tokens, 16);
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_k, 0);          // vLLM's -1 means off
  EXPECT_EQ(r.sampling.seed, UINT64_MAX);  // -1's two's-complement bits
  r = ParseChat(R"({"model": "m", )" + msgs + R"(, "seed": 18446744073709551615})");
  EXPECT_EQ(r.sampling.seed, UINT64_MAX);
  // OpenAI's SDKs send explicit nulls for unset fields.
  r = ParseChat(R"({"model": null, )" + msgs +
                R"(, "temperature": null, "max_tokens": null, "stop": null, "seed": null,
                "stream": null, "stream_options": null, "logprobs": null, "top_logprobs": null,
                "n": null, "user": null, "tools": null, "logit_bias": null})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.sampling.max_tokens.has_value());
  // Harmless forms of unsupported fields are accepted, and an unknown field that is null (unset);
  // an unknown field with a value is a 400 (openai_request_errors_test).
  r = ParseChat(R"({"model": "m", )" + msgs +
                R"(, "n": 1, "logit_bias": {}, "tools": [], "response_format": {"type": "text"},
                "tool_choice": "none", "parallel_tool_calls": false, "metadata": {"a": 1},
                "some_future_field": null})");
  EXPECT_EQ(r.messages.size(), 1u);
  // As in vLLM: an empty stream_options without stream, and top_logprobs 0 without logprobs.
  r = ParseChat(R"({"model": "m", )" + msgs + R"(, "stream_options": {}, "top_logprobs": 0})");
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
}

TEST(OpenAiRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  auto r = ParseChat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                        "max_tokens": 10, "max_completion_tokens": 20})");
  EXPECT_EQ(r.sampling.max_tokens, 20);
  r = ParseChat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                   "max_tokens": 10, "max_completion_tokens": null})");
  EXPECT_EQ(r.sampling.max_tokens, 10);
}

TEST(OpenAiRequestTest, SpeculativeOptOut) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_TRUE(ParseChat("{" + msgs + "}").sampling.speculative);  // on unless opted out
  EXPECT_FALSE(ParseChat("{" + msgs + R"(, "speculative": false})").sampling.speculative);
  EXPECT_TRUE(ParseChat("{" + msgs + R"(, "speculative": null})").sampling.speculative);
  EXPECT_FALSE(ParseText(R"({"prompt": "x", "speculative": false})").sampling.speculative);
}

TEST(OpenAiRequestTest, SingleStopStringBecomesAList) {
  auto r = ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "stop": "###"})");
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"###"});
}

TEST(OpenAiRequestTest, CompletionPromptForms) {
  CompletionRequest r = ParseText(R"({"model": "m", "prompt": "Once upon"})");
  ASSERT_FALSE(r.prompt_is_token_ids());
  EXPECT_EQ(std::get<std::string>(r.prompt), "Once upon");
  EXPECT_EQ(r.sampling.max_tokens, 16);  // OpenAI's completions default
  EXPECT_FALSE(r.logprobs.has_value());
  EXPECT_FALSE(r.echo);

  r = ParseText(R"({"model": "m", "prompt": ["Once upon"]})");
  EXPECT_EQ(std::get<std::string>(r.prompt), "Once upon");

  r = ParseText(R"({"model": "m", "prompt": [1, 2, 999]})");
  ASSERT_TRUE(r.prompt_is_token_ids());
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompt), (std::vector<int32_t>{1, 2, 999}));

  r = ParseText(R"({"model": "m", "prompt": [[0, 7]]})");
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompt), (std::vector<int32_t>{0, 7}));

  r = ParseText(R"({"model": "m", "prompt": "x", "logprobs": 0, "echo": true, "max_tokens": 1,
                    "suffix": null, "best_of": 1})");
  EXPECT_EQ(r.logprobs, 0);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.sampling.max_tokens, 1);
}

TEST(OpenAiRequestTest, SeveralPromptsAndChoices) {
  CompletionRequest r = ParseText(R"({"model": "m", "prompt": ["a", "bc", "d"], "n": 2})");
  ASSERT_EQ(r.prompt_count(), 3u);
  EXPECT_EQ(r.n, 2);
  const char* want[] = {"a", "bc", "d"};
  for (size_t i = 0; i < 3; ++i) {
    CompletionRequest one = r.ForPrompt(i);
    EXPECT_EQ(one.prompt_count(), 1u);
    EXPECT_EQ(std::get<std::string>(one.prompt), want[i]);
    EXPECT_EQ(one.n, 2);
  }

  r = ParseText(R"({"model": "m", "prompt": [[1, 2], [3], [4, 5, 6], [7]]})");
  ASSERT_EQ(r.prompt_count(), 4u);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.ForPrompt(2).prompt), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.ForPrompt(3).prompt), (std::vector<int32_t>{7}));

  // A list mixing the two forms: each prompt is its own.
  r = ParseText(R"({"model": "m", "prompt": ["x", [9]]})");
  ASSERT_EQ(r.prompt_count(), 2u);
  EXPECT_FALSE(r.ForPrompt(0).prompt_is_token_ids());
  EXPECT_TRUE(r.ForPrompt(1).prompt_is_token_ids());

  // 128 choices (the cap) are fine, as 64 prompts times n = 2.
  std::string many = "[";
  for (int i = 0; i < 64; ++i) many += i ? ", \"p\"" : "\"p\"";
  r = ParseText(R"({"model": "m", "n": 2, "prompt": )" + many + "]}");
  EXPECT_EQ(r.prompt_count(), 64u);

  ChatCompletionRequest c = ParseChat(R"({"model": "m", "n": 4,
      "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(c.n, 4);
}

TEST(OpenAiRequestTest, UnknownVocabularyOnlyChecksSign) {
  ParseOptions o = Options();
  o.vocab_size = 0;
  auto r = ParseText(R"({"model": "m", "prompt": [2000000000], "top_k": 5000000})", o);
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompt), (std::vector<int32_t>{2000000000}));
  EXPECT_EQ(r.sampling.top_k, 5000000);
}

// What lm-evaluation-harness's local-completions model sends for loglikelihood requests
// (tokenized, batch size 1) and for generate_until.
TEST(OpenAiRequestTest, LmEvalHarnessPayloads) {
  CompletionRequest r = ParseText(R"({"model": "m", "prompt": [[11, 12, 13, 14]],
      "temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": true})");
  EXPECT_EQ(std::get<std::vector<int32_t>>(r.prompt), (std::vector<int32_t>{11, 12, 13, 14}));
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.max_tokens, 1);
  EXPECT_EQ(r.logprobs, 1);
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.sampling.seed, uint64_t{1234});

  r = ParseText(R"({"prompt": ["Question: 2+2=?\nAnswer:"], "model": "m", "max_tokens": 256,
      "temperature": 0, "stop": ["\n\n", "Question:"], "seed": 1234})");
  EXPECT_EQ(std::get<std::string>(r.prompt), "Question: 2+2=?\nAnswer:");
  EXPECT_EQ(r.sampling.stop.size(), 2u);
}

TEST(OpenAiRequestTest, PromptTooLongUsesOpenAisWording) {
  ApiError e = PromptTooLong(4000, 200, 4096);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, you requested 4200 "
            "tokens (4000 in the messages, 200 in the completion). Please reduce the length of "
            "the messages or completion.");
  e = PromptTooLong(5000, 0, 4096, ApiEndpoint::kCompletions);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 4096 tokens. However, your prompt resulted "
            "in 5000 tokens, which leaves no room for the completion. Please reduce the length "
            "of the prompt.");
}

TEST(OpenAiRequestTest, ResolveMaxTokens) {
  const ApiEndpoint chat = ApiEndpoint::kChatCompletions;
  EXPECT_EQ(*ResolveMaxTokens(std::nullopt, 100, 4096, chat), 3996);
  EXPECT_EQ(*ResolveMaxTokens(50, 100, 4096, chat), 50);
  EXPECT_EQ(*ResolveMaxTokens(3996, 100, 4096, chat), 3996);
  auto over = ResolveMaxTokens(3997, 100, 4096, chat);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message.find("you requested 4097 tokens"), std::string::npos);
  auto full = ResolveMaxTokens(std::nullopt, 4096, 4096, ApiEndpoint::kCompletions);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().message.find("leaves no room"), std::string::npos);
  // No overflow when a huge max_tokens meets a long prompt.
  auto huge = ResolveMaxTokens(2147483647, 2000, 4096, chat);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("you requested 2147485647 tokens"), std::string::npos);
}

}  // namespace
}  // namespace dq::router
