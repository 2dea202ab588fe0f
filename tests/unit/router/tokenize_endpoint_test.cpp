// POST /tokenize and /detokenize: parsing (both forms, every refusal), the response bodies, the
// round trip on Unicode text, and that the chat form's ids are what a chat completion renders.
#include "router/tokenize_endpoint.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/tokenize_request.h"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

using nlohmann::json;

ParseOptions Options(const ServedModel& m) {
  ParseOptions o;
  o.served_models = {m.name};
  o.vocab_size = m.vocab_size;
  return o;
}

class TokenizeEndpointTest : public ::testing::Test {
 protected:
  TokenizeEndpointTest() : model_(TestModel(4096)), options_(Options(model_)) {}

  // The /tokenize answer for `body` (which must parse and tokenize).
  json Tokenize(const json& body) {
    ApiResult<TokenizeRequest> r = ParseTokenizeRequest(body.dump(), options_);
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (!r.ok()) return json();
    ApiResult<std::string> out = TokenizeJson(*r, model_);
    EXPECT_TRUE(out.ok()) << out.error().message;
    return out.ok() ? json::parse(*out) : json();
  }
  std::string Detokenize(const std::vector<int32_t>& ids) {
    ApiResult<DetokenizeRequest> r = ParseDetokenizeRequest(json{{"tokens", ids}}.dump(), options_);
    EXPECT_TRUE(r.ok()) << r.error().message;
    if (!r.ok()) return "";
    return json::parse(DetokenizeJson(*r, model_))["prompt"].get<std::string>();
  }

  ServedModel model_;
  ParseOptions options_;
};

TEST_F(TokenizeEndpointTest, PromptFormAnswersVllmsShape) {
  const std::string text = "Hello world, the answer is 42.";
  const json body = Tokenize({{"model", "tiny"}, {"prompt", text}});
  const std::vector<int32_t> want = model_.tokenizer.Encode(text);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(body["count"], want.size());
  EXPECT_EQ(body["max_model_len"], 4096);
  EXPECT_FALSE(body.contains("token_strs")) << body;
  // The keys in vLLM's order.
  EXPECT_EQ(body.dump().find("{\"count\":"), 0u) << body;
}

TEST_F(TokenizeEndpointTest, TokenStrsOnlyWhenAsked) {
  const json body = Tokenize({{"prompt", "Hello world"}, {"return_token_strs", true}});
  const auto ids = body["tokens"].get<std::vector<int32_t>>();
  ASSERT_EQ(body["token_strs"].size(), ids.size());
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(body["token_strs"][i], std::string(model_.tokenizer.IdToToken(ids[i])));
    joined += body["token_strs"][i].get<std::string>();
  }
  EXPECT_NE(joined.find("world"), std::string::npos) << joined;
}

TEST_F(TokenizeEndpointTest, RoundTripOnUnicodeText) {
  const std::vector<std::string> texts = {"héllo wörld — naïve café",
                                          "日本語のテキストと中文",
                                          "emoji 🎉🚀 and Ω≈ç√∫",
                                          "  leading spaces\n\ttabs\r\nand lines  ",
                                          "",
                                          "<|im_start|>user\nhi<|im_end|>"};
  for (const std::string& text : texts) {
    const json body = Tokenize({{"prompt", text}});
    EXPECT_EQ(Detokenize(body["tokens"].get<std::vector<int32_t>>()), text) << text;
  }
  // Fresh random text drawn from mixed scripts.
  const std::vector<std::string> pieces = {"a",  "Z", " ", "é", "ß",  "日", "語", "🎉",
                                           "\n", "9", "Ω", "ж", "का", ",",  "?"};
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 20; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    for (int i = 0; i < n; ++i) {
      text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    }
    const json body = Tokenize({{"prompt", text}});
    EXPECT_EQ(Detokenize(body["tokens"].get<std::vector<int32_t>>()), text) << text;
  }
}

TEST_F(TokenizeEndpointTest, ChatFormIsWhatChatPromptRenders) {
  const json messages = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Hi there ✓"}}});
  std::vector<ChatMessage> typed(2);
  typed[0].role = "system";
  typed[0].content = "Be brief.";
  typed[1].role = "user";
  typed[1].content = "Hi there ✓";
  for (bool gen : {true, false}) {
    const json body = Tokenize({{"messages", messages}, {"add_generation_prompt", gen}});
    ChatRenderOptions opts;
    opts.add_generation_prompt = gen;
    ApiResult<std::vector<int32_t>> want = model_.ChatPrompt(typed, opts);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(body["tokens"].get<std::vector<int32_t>>(), *want) << gen;
    const std::string text = Detokenize(*want);
    EXPECT_EQ(text.ends_with("<|im_start|>assistant\n"), gen) << text;
  }
  // Template kwargs and tools reach the template as they do for a chat completion.
  const json tools = json::parse(
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])");
  const json with_tools = Tokenize({{"messages", messages}, {"tools", tools}});
  EXPECT_NE(Detokenize(with_tools["tokens"].get<std::vector<int32_t>>()).find("get_weather"),
            std::string::npos);
  const json no_think =
      Tokenize({{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_NE(no_think["tokens"], Tokenize({{"messages", messages}})["tokens"]);
}

// The error's status and param for a /tokenize body.
void ExpectError(const ParseOptions& o, const std::string& body, int status,
                 const std::string& param, const std::string& message_part = "") {
  ApiResult<TokenizeRequest> r = ParseTokenizeRequest(body, o);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.error().http_status, status) << body;
  EXPECT_EQ(r.error().param, param) << body << ": " << r.error().message;
  EXPECT_NE(r.error().message.find(message_part), std::string::npos) << r.error().message;
}

TEST_F(TokenizeEndpointTest, TokenizeRefusals) {
  ExpectError(options_, "{not json", 400, "");
  ExpectError(options_, "[1]", 400, "");
  ExpectError(options_, "{}", 400, "prompt", "Missing");
  ExpectError(options_, R"({"prompt": 5})", 400, "prompt", "string");
  ExpectError(options_, R"({"prompt": "x", "messages": [{"role":"user","content":"y"}]})", 400,
              "messages", "not both");
  ExpectError(options_, R"({"prompt": "x", "add_special_tokens": "yes"})", 400,
              "add_special_tokens");
  ExpectError(options_, R"({"prompt": "x", "return_token_strs": 1})", 400, "return_token_strs");
  ExpectError(options_, R"({"prompt": "x", "frobnicate": 1})", 400, "frobnicate");
  ExpectError(options_, R"({"prompt": "x", "add_generation_prompt": true})", 400,
              "add_generation_prompt");
  ExpectError(options_, R"({"model": "gpt-4", "prompt": "x"})", 404, "model", "does not exist");
  ExpectError(options_, R"({"messages": []})", 400, "messages", "empty");
  ExpectError(options_, R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
              "messages[0].role");
  ExpectError(options_,
              R"({"messages": [{"role":"user","content":"x"}], "continue_final_message": true})",
              400, "continue_final_message");
  ExpectError(options_, R"({"messages": [{"role":"user","content":"x"}], "chat_template": "x"})",
              400, "chat_template");
  ApiResult<TokenizeRequest> r =
      ParseTokenizeRequest(R"({"model": "gpt-4", "prompt": "x"})", options_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "model_not_found");
}

TEST_F(TokenizeEndpointTest, DefaultsOfEachForm) {
  ApiResult<TokenizeRequest> p = ParseTokenizeRequest(R"({"prompt": "x"})", options_);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->add_special_tokens);
  EXPECT_FALSE(p->return_token_strs);
  EXPECT_EQ(p->model, "tiny");
  ApiResult<TokenizeRequest> c =
      ParseTokenizeRequest(R"({"messages": [{"role":"user","content":"x"}]})", options_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->prompt.has_value());
  EXPECT_FALSE(c->add_special_tokens);
  EXPECT_TRUE(c->add_generation_prompt);
  ASSERT_EQ(c->chat.messages.size(), 1u);
}

TEST_F(TokenizeEndpointTest, ChatWithoutTemplateIs400) {
  model_.chat_template.reset();
  ApiResult<TokenizeRequest> r =
      ParseTokenizeRequest(R"({"messages": [{"role":"user","content":"x"}]})", options_);
  ASSERT_TRUE(r.ok());
  ApiResult<std::string> out = TokenizeJson(*r, model_);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().http_status, 400);
  EXPECT_EQ(out.error().param, "messages");
}

TEST_F(TokenizeEndpointTest, DetokenizeRefusals) {
  const std::string last = std::to_string(model_.vocab_size - 1);
  const std::string over = std::to_string(model_.vocab_size);
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens": [0, )" + last + "]}", options_).ok());
  EXPECT_TRUE(ParseDetokenizeRequest(R"({"tokens": []})", options_).ok());
  struct Case {
    std::string body;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {"{}", 400, "tokens"},
      {R"({"tokens": "hello"})", 400, "tokens"},
      {R"({"tokens": [1, )" + over + "]}", 400, "tokens[1]"},
      {R"({"tokens": [-1]})", 400, "tokens[0]"},
      {R"({"tokens": [1.5]})", 400, "tokens[0]"},
      {R"({"tokens": [1], "prompt": "x"})", 400, "prompt"},
      {R"({"model": "other", "tokens": [1]})", 404, "model"},
      {"nope", 400, ""},
  };
  for (const Case& c : cases) {
    ApiResult<DetokenizeRequest> r = ParseDetokenizeRequest(c.body, options_);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().http_status, c.status) << c.body;
    EXPECT_EQ(r.error().param, c.param) << c.body << ": " << r.error().message;
  }
}

}  // namespace
}  // namespace dq::router
