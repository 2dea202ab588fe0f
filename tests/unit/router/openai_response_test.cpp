// Exact JSON of responses, stream chunks and logprobs (golden strings).
#include "router/openai_response.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dq::router {
namespace {

const ResponseHeader kChatHeader{"chatcmpl-abc", 1700000000, "m"};
const ResponseHeader kTextHeader{"cmpl-xyz", 1700000000, "m"};
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD

TEST(OpenAiResponseTest, ChatCompletion) {
  ChatChoice choice{"Hello!", FinishReason::kStop, std::nullopt};
  EXPECT_EQ(
      ChatCompletionJson(kChatHeader, choice, {5, 2}),
      R"({"id":"chatcmpl-abc","object":"chat.completion","created":1700000000,"model":"m",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},)"
      R"("logprobs":null,"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenAiResponseTest, UsageCarriesSpeculationCounters) {
  ChatChoice choice{"Hi", FinishReason::kLength, std::nullopt};
  Usage usage{5, 9, SpecUsage{4, 12, 6}};
  const std::string j = ChatCompletionJson(kChatHeader, choice, usage);
  // Acceptance length: (accepted + steps) / steps = (6 + 4) / 4.
  EXPECT_NE(
      j.find(
          R"("total_tokens":14,"prompt_tokens_details":{"cached_tokens":0},"speculative":{"steps":4,)"
          R"("drafted_tokens":12,)"
          R"("accepted_tokens":6,"acceptance_rate":0.5,"acceptance_length":2.5}})"),
      std::string::npos)
      << j;
}

TEST(OpenAiResponseTest, ChatCompletionWithLogprobs) {
  // "\xC3" is half of "é": the token string shows U+FFFD, bytes keep the raw byte.
  ChatChoice choice{"Hel\xC3", FinishReason::kLength,
                    std::vector<TokenLogprobs>{
                        {"Hel", -0.25f, {{"Hel", -0.25f}, {"Hi", -1.5f}}},
                        {"\xC3", -0.1f, {}},
                    }};
  choice.content = "Hel";
  EXPECT_EQ(
      ChatCompletionJson(kChatHeader, choice, {3, 2}),
      R"({"id":"chatcmpl-abc","object":"chat.completion","created":1700000000,"model":"m",)"
      R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hel"},)"
      R"("logprobs":{"content":[)"
      R"({"token":"Hel","logprob":-0.25,"bytes":[72,101,108],"top_logprobs":[)"
      R"({"token":"Hel","logprob":-0.25,"bytes":[72,101,108]},)"
      R"({"token":"Hi","logprob":-1.5,"bytes":[72,105]}]},)"
      R"({"token":")" +
          kReplacement +
          R"(","logprob":-0.1,"bytes":[195],"top_logprobs":[]}]},)"
          R"("finish_reason":"length"}],)"
          R"("usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenAiResponseTest, MinusInfinityBecomesMinus9999) {
  const std::vector<TokenLogprobs> t = {{"a", -INFINITY, {{"b", -INFINITY}}}};
  EXPECT_EQ(ChatLogprobsJson(t).dump(),
            R"({"content":[{"token":"a","logprob":-9999.0,"bytes":[97],"top_logprobs":[)"
            R"({"token":"b","logprob":-9999.0,"bytes":[98]}]}]})");
  EXPECT_EQ(CompletionLogprobsJson(t).dump(),
            R"({"text_offset":[0],"token_logprobs":[-9999.0],"tokens":["a"],)"
            R"("top_logprobs":[{"b":-9999.0,"a":-9999.0}]})");
}

TEST(OpenAiResponseTest, Completion) {
  CompletionChoice choice{" sat on the mat", FinishReason::kStop, std::nullopt};
  EXPECT_EQ(
      CompletionJson(kTextHeader, choice, {2, 4}),
      R"({"id":"cmpl-xyz","object":"text_completion","created":1700000000,"model":"m",)"
      R"("choices":[{"index":0,"text":" sat on the mat","logprobs":null,)"
      R"("finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":2,"completion_tokens":4,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":0}}})");
}

// echo + logprobs: the prompt's tokens first (the first one has no logprob), then the
// generated ones; each top_logprobs dict holds the alternatives plus the chosen token.
CompletionChoice EchoedChoice() {
  CompletionChoice choice{" sat", FinishReason::kLength,
                          std::vector<TokenLogprobs>{{" sat", -0.75f, {{" sat", -0.75f}}}}};
  PrependEcho("The cat", {{"The", std::nullopt, {}}, {" cat", -2.5f, {{" dog", -1.0f}}}}, &choice);
  return choice;
}

TEST(OpenAiResponseTest, CompletionWithEchoedPromptLogprobs) {
  EXPECT_EQ(
      CompletionJson(kTextHeader, EchoedChoice(), {2, 1}),
      R"({"id":"cmpl-xyz","object":"text_completion","created":1700000000,"model":"m",)"
      R"("choices":[{"index":0,"text":"The cat sat","logprobs":{)"
      R"("text_offset":[0,3,7],"token_logprobs":[null,-2.5,-0.75],)"
      R"("tokens":["The"," cat"," sat"],)"
      R"("top_logprobs":[null,{" dog":-1.0," cat":-2.5},{" sat":-0.75}]},)"
      R"("finish_reason":"length"}],)"
      R"("usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}})");
}

// What lm-evaluation-harness's LocalCompletionsAPI.parse_logprobs computes from the body.
TEST(OpenAiResponseTest, LmEvalHarnessReadsLoglikelihoodAndGreediness) {
  const nlohmann::json body =
      nlohmann::json::parse(CompletionJson(kTextHeader, EchoedChoice(), {2, 1}));
  const nlohmann::json& lp = body["choices"][0]["logprobs"];
  const size_t ctxlen = 1;                             // context "The", continuation " cat"
  const size_t end = lp["token_logprobs"].size() - 1;  // [ctxlen:-1] drops the generated token
  double sum = 0;
  bool greedy = true;
  for (size_t i = ctxlen; i < end; ++i) {
    const double tok = lp["token_logprobs"][i];
    sum += tok;
    double best = -INFINITY;
    for (const auto& [_, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    greedy = greedy && tok == best;
  }
  EXPECT_EQ(sum, -2.5);
  EXPECT_FALSE(greedy);  // " dog" was more likely than " cat"
}

TEST(OpenAiResponseTest, RepeatedTokenStringsKeepTheHigherLogprob) {
  // Two different partial-UTF-8 tokens both show as U+FFFD.
  const std::vector<TokenLogprobs> t = {{"a", -2.0f, {{"\xC3", -1.0f}, {"\xC4", -0.5f}}}};
  EXPECT_EQ(CompletionLogprobsJson(t, 10).dump(),
            R"({"text_offset":[10],"token_logprobs":[-2.0],"tokens":["a"],)"
            R"("top_logprobs":[{")" +
                kReplacement + R"(":-0.5,"a":-2.0}]})");
}

TEST(OpenAiResponseTest, TextOffsetsCountCodePoints) {
  const std::vector<TokenLogprobs> t = {{"caf\xC3\xA9", -1.0f, {}}, {"!", -1.0f, {}}};
  EXPECT_EQ(CompletionLogprobsJson(t)["text_offset"].dump(), "[0,4]");
}

TEST(OpenAiResponseTest, ChatStream) {
  ChatCompletionStream s(kChatHeader, /*include_usage=*/true, /*logprobs=*/false);
  const std::string head =
      R"(data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,)"
      R"("model":"m",)";
  EXPECT_EQ(s.RoleChunk(), head + R"("choices":[{"index":0,"delta":{"role":"assistant",)"
                                  R"("content":""},"logprobs":null,"finish_reason":null}],)"
                                  R"("usage":null})"
                                  "\n\n");
  EXPECT_EQ(s.ContentChunk("Hi \xE2\x9C\x93"),
            head + R"("choices":[{"index":0,"delta":{"content":"Hi )"
                   "\xE2\x9C\x93"
                   R"("},)"
                   R"("logprobs":null,"finish_reason":null}],"usage":null})"
                   "\n\n");
  EXPECT_EQ(s.FinishChunk(FinishReason::kLength),
            head + R"("choices":[{"index":0,"delta":{},"logprobs":null,)"
                   R"("finish_reason":"length"}],"usage":null})"
                   "\n\n");
  EXPECT_EQ(s.UsageChunk({3, 1}),
            head + R"("choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,)"
                   R"("total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}})"
                   "\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
}

TEST(OpenAiResponseTest, ChatStreamWithoutUsageAndWithLogprobs) {
  ChatCompletionStream s(kChatHeader, /*include_usage=*/false, /*logprobs=*/true);
  const std::vector<TokenLogprobs> lp = {{"Hi", -0.5f, {{"Hi", -0.5f}}}};
  EXPECT_EQ(s.ContentChunk("Hi", lp),
            R"(data: {"id":"chatcmpl-abc","object":"chat.completion.chunk",)"
            R"("created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"Hi"},)"
            R"("logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],)"
            R"("top_logprobs":[{"token":"Hi","logprob":-0.5,"bytes":[72,105]}]}]},)"
            R"("finish_reason":null}]})"
            "\n\n");
  EXPECT_EQ(s.UsageChunk({1, 1}), "");
  EXPECT_EQ(s.RoleChunk().find("usage"), std::string::npos);
}

TEST(OpenAiResponseTest, CompletionStreamCarriesTextOffsetsAcrossChunks) {
  CompletionStream s(kTextHeader, /*include_usage=*/false, /*logprobs=*/true);
  const std::vector<TokenLogprobs> prompt = {{"The", std::nullopt, {}},
                                             {" cat", -2.5f, {{" dog", -1.0f}}}};
  const std::string head =
      R"(data: {"id":"cmpl-xyz","object":"text_completion","created":1700000000,"model":"m",)";
  EXPECT_EQ(s.TextChunk("The cat", prompt),
            head + R"("choices":[{"index":0,"text":"The cat","logprobs":{"text_offset":[0,3],)"
                   R"("token_logprobs":[null,-2.5],"tokens":["The"," cat"],)"
                   R"("top_logprobs":[null,{" dog":-1.0," cat":-2.5}]},"finish_reason":null}]})"
                   "\n\n");
  const std::vector<TokenLogprobs> gen = {{" sat", -0.75f, {}}};
  EXPECT_EQ(s.TextChunk(" sat", gen),
            head + R"("choices":[{"index":0,"text":" sat","logprobs":{"text_offset":[7],)"
                   R"("token_logprobs":[-0.75],"tokens":[" sat"],)"
                   R"("top_logprobs":[{" sat":-0.75}]},"finish_reason":null}]})"
                   "\n\n");
  EXPECT_EQ(s.FinishChunk(FinishReason::kStop),
            head + R"("choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]})"
                   "\n\n");
}

TEST(OpenAiResponseTest, CompletionStreamUsageChunk) {
  CompletionStream s(kTextHeader, /*include_usage=*/true, /*logprobs=*/false);
  EXPECT_EQ(s.TextChunk("a"),
            R"(data: {"id":"cmpl-xyz","object":"text_completion","created":1700000000,)"
            R"("model":"m","choices":[{"index":0,"text":"a","logprobs":null,)"
            R"("finish_reason":null}],"usage":null})"
            "\n\n");
  EXPECT_EQ(s.UsageChunk({4, 1}),
            R"(data: {"id":"cmpl-xyz","object":"text_completion","created":1700000000,)"
            R"("model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,)"
            R"("total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}})"
            "\n\n");
}

TEST(OpenAiResponseTest, StreamErrorEvent) {
  ApiError e{503, "server_error", "decode worker went away; retry the request", "", ""};
  EXPECT_EQ(SseError(e),
            R"(data: {"error":{"message":"decode worker went away; retry the request",)"
            R"("type":"server_error","param":null,"code":null}})"
            "\n\n");
}

TEST(OpenAiResponseTest, InvalidUtf8InTextNeverThrows) {
  ChatCompletionStream s(kChatHeader, false, false);
  std::string chunk;
  EXPECT_NO_THROW(chunk = s.ContentChunk("bad \xFF"));
  EXPECT_NE(chunk.find(kReplacement), std::string::npos);
}

TEST(OpenAiResponseTest, FreshHeaders) {
  const ResponseHeader a = NewResponseHeader(ApiEndpoint::kChatCompletions, "m");
  const ResponseHeader b = NewResponseHeader(ApiEndpoint::kCompletions, "m");
  EXPECT_EQ(a.id.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.id.size(), 9u + 24u);
  EXPECT_EQ(b.id.rfind("cmpl-", 0), 0u);
  EXPECT_NE(a.id.substr(9), b.id.substr(5));
  EXPECT_GT(a.created, 1700000000);
  EXPECT_EQ(a.model, "m");
}

}  // namespace
}  // namespace dq::router
