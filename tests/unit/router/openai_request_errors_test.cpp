// Every validation error of the request parser: HTTP status, param and a message substring.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "router/openai_request.h"

namespace dq::router {
namespace {

ParseOptions Options() {
  ParseOptions o;
  o.served_models = {"m", "m2"};
  o.vocab_size = 1000;
  return o;
}

// A valid chat body with `extra` fields appended (e.g. R"("temperature": 3)").
std::string Chat(const std::string& extra) {
  std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}])";
  return extra.empty() ? body + "}" : body + ", " + extra + "}";
}
// A chat body whose messages array is `messages`.
std::string ChatMessages(const std::string& messages) {
  return R"({"model": "m", "messages": )" + messages + "}";
}
std::string Completion(const std::string& extra) {
  std::string body = R"({"model": "m", "prompt": "hi")";
  return extra.empty() ? body + "}" : body + ", " + extra + "}";
}
// A JSON array of `count` one-word prompts.
std::string PromptList(int count) {
  std::string out = "[";
  for (int i = 0; i < count; ++i) out += (i ? ", \"p" : "\"p") + std::to_string(i) + "\"";
  return out + "]";
}

std::string CompletionPrompt(const std::string& prompt) {
  return R"({"model": "m", "prompt": )" + prompt + "}";
}

struct ErrorCase {
  std::string name;
  ApiEndpoint endpoint;
  std::string body;
  int status;
  std::string param;
  std::string message_part;
  std::string code = "";
};

ApiError ParseError(const ErrorCase& c) {
  if (c.endpoint == ApiEndpoint::kChatCompletions) {
    auto r = ParseChatCompletionRequest(c.body, Options());
    EXPECT_FALSE(r.ok()) << c.name << " parsed";
    return r.ok() ? ApiError{} : r.error();
  }
  auto r = ParseCompletionRequest(c.body, Options());
  EXPECT_FALSE(r.ok()) << c.name << " parsed";
  return r.ok() ? ApiError{} : r.error();
}

void ExpectErrors(const std::vector<ErrorCase>& cases) {
  for (const ErrorCase& c : cases) {
    const ApiError e = ParseError(c);
    EXPECT_EQ(e.http_status, c.status) << c.name << ": " << e.message;
    EXPECT_EQ(e.param, c.param) << c.name << ": " << e.message;
    EXPECT_NE(e.message.find(c.message_part), std::string::npos)
        << c.name << ": message \"" << e.message << "\" lacks \"" << c.message_part << "\"";
    EXPECT_EQ(e.code, c.code) << c.name;
    EXPECT_EQ(e.type, "invalid_request_error") << c.name;
  }
}

constexpr ApiEndpoint kChat = ApiEndpoint::kChatCompletions;
constexpr ApiEndpoint kText = ApiEndpoint::kCompletions;

TEST(OpenAiRequestErrorsTest, BodyLevel) {
  ExpectErrors({
      {"empty body", kChat, "", 400, "", "The request body is empty"},
      {"truncated JSON", kChat, R"({"model": )", 400, "",
       "is not valid JSON (parse error at line 1, column 11: syntax error"},
      {"trailing garbage", kChat, Chat("") + "x", 400, "", "is not valid JSON"},
      {"top-level array", kChat, "[1, 2]", 400, "", "must be a JSON object, but got an array"},
      {"top-level string", kText, R"("hi")", 400, "", "must be a JSON object, but got a string"},
      {"deep nesting", kChat, std::string(100, '[') + std::string(100, ']'), 400, "",
       "more than 64 levels deep"},
      {"overlong UTF-8 in a string", kChat,
       ChatMessages("[{\"role\": \"user\", \"content\": \"a\xC0\xAF\"}]"), 400, "",
       "not valid UTF-8 (overlong encoding at byte 58)"},
      {"raw surrogate bytes", kText, CompletionPrompt("\"\xED\xA0\x80\""), 400, "",
       "not valid UTF-8 (UTF-16 surrogate at byte 26)"},
      {"truncated sequence", kText, CompletionPrompt("\"ab\xE2\x82\""), 400, "",
       "not valid UTF-8 (truncated sequence at byte 28)"},
      {"number overflowing a double", kChat, Chat(R"("temperature": 1e400)"), 400, "",
       "is not valid JSON (number overflow parsing '1e400')"},
      {"lone escaped surrogate", kText, CompletionPrompt(R"("\ud800")"), 400, "",
       "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF). Send a JSON object"},
  });
}

TEST(OpenAiRequestErrorsTest, Messages) {
  ExpectErrors({
      {"missing messages", kChat, R"({"model": "m"})", 400, "messages",
       "Missing required parameter: 'messages'."},
      {"messages a string", kChat, ChatMessages(R"("hi")"), 400, "messages",
       "Invalid type for 'messages': expected an array of messages, but got a string instead."},
      {"empty messages", kChat, ChatMessages("[]"), 400, "messages", "empty array"},
      {"message not an object", kChat, ChatMessages("[1]"), 400, "messages[0]",
       "expected an object, but got an integer"},
      {"missing role", kChat, ChatMessages(R"([{"content": "x"}])"), 400, "messages[0].role",
       "Missing required parameter: 'messages[0].role'."},
      {"role not a string", kChat, ChatMessages(R"([{"role": 5, "content": "x"}])"), 400,
       "messages[0].role", "Invalid type for 'messages[0].role': expected a string"},
      {"unknown role", kChat,
       ChatMessages(R"([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])"),
       400, "messages[1].role",
       "Invalid value for 'messages[1].role': 'wizard'. Supported values are: 'system', "
       "'developer', 'user', 'assistant' and 'tool'."},
      {"function role", kChat, ChatMessages(R"([{"role": "function", "content": "x"}])"), 400,
       "messages[0].role", "deprecated form of tool messages"},
      {"tool calls on a user turn", kChat,
       ChatMessages(R"([{"role": "user", "content": "x", "tool_calls": []}])"), 400,
       "messages[0].tool_calls", "Only assistant messages"},
      {"tool_call_id on a user turn", kChat,
       ChatMessages(R"([{"role": "user", "content": "x", "tool_call_id": "a"}])"), 400,
       "messages[0].tool_call_id", "Only tool messages"},
      {"tool call without arguments", kChat,
       ChatMessages(R"([{"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                       "function": {"name": "f"}}]}])"),
       400, "messages[0].tool_calls[0].function.arguments", "Missing required parameter"},
      {"tool call arguments an object", kChat,
       ChatMessages(R"([{"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                       "function": {"name": "f", "arguments": {}}}]}])"),
       400, "messages[0].tool_calls[0].function.arguments", "expected a string"},
      {"unknown message field", kChat,
       ChatMessages(R"([{"role": "user", "content": "x", "audio": {"id": "a"}}])"), 400,
       "messages[0].audio", "Unrecognized request argument"},
      {"tool without content", kChat, ChatMessages(R"([{"role": "tool", "tool_call_id": "a"}])"),
       400, "messages[0].content", "Missing required parameter"},
      {"missing user content", kChat, ChatMessages(R"([{"role": "user"}])"), 400,
       "messages[0].content", "Missing required parameter: 'messages[0].content'."},
      {"null system content", kChat, ChatMessages(R"([{"role": "system", "content": null}])"), 400,
       "messages[0].content", "Missing required parameter"},
      {"content a number", kChat, ChatMessages(R"([{"role": "user", "content": 5}])"), 400,
       "messages[0].content", "expected a string or an array of content parts"},
      {"image part", kChat,
       ChatMessages(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"),
       400, "messages[0].content[0].type", "'image_url' is not supported"},
      {"part without type", kChat,
       ChatMessages(R"([{"role": "user", "content": [{"text": "x"}]}])"), 400,
       "messages[0].content[0].type", "Missing required parameter"},
      {"part without text", kChat,
       ChatMessages(R"([{"role": "user", "content": [{"type": "text"}]}])"), 400,
       "messages[0].content[0].text", "Missing required parameter"},
      {"part text a number", kChat,
       ChatMessages(R"([{"role": "user", "content": [{"type": "text", "text": 1}]}])"), 400,
       "messages[0].content[0].text", "Invalid type for 'messages[0].content[0].text'"},
      {"part not an object", kChat, ChatMessages(R"([{"role": "user", "content": ["x"]}])"), 400,
       "messages[0].content[0]", "expected an object, but got a string"},
  });
}

TEST(OpenAiRequestErrorsTest, ModelAndTokens) {
  ExpectErrors({
      {"unknown model", kChat,
       R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})", 404, "model",
       "The model 'gpt-9' does not exist. This server serves: 'm', 'm2'.", "model_not_found"},
      {"model a number", kText, R"({"model": 3, "prompt": "x"})", 400, "model",
       "expected a string, but got an integer"},
      {"max_tokens 0", kChat, Chat(R"("max_tokens": 0)"), 400, "max_tokens",
       "expected an integer of at least 1, but got 0 instead"},
      {"max_tokens negative", kText, Completion(R"("max_tokens": -5)"), 400, "max_tokens",
       "but got -5 instead. To score a prompt"},
      {"max_tokens fractional", kChat, Chat(R"("max_tokens": 1.5)"), 400, "max_tokens",
       "expected an integer, but got a number"},
      {"max_tokens a string", kChat, Chat(R"("max_tokens": "16")"), 400, "max_tokens",
       "Invalid type for 'max_tokens': expected an integer, but got a string instead."},
      {"max_tokens huge", kChat, Chat(R"("max_tokens": 10000000000)"), 400, "max_tokens",
       "expected an integer in [1, 2147483647]"},
      {"max_completion_tokens 0", kChat, Chat(R"("max_completion_tokens": 0)"), 400,
       "max_completion_tokens", "at least 1"},
      {"n 0", kText, Completion(R"("n": 0)"), 400, "n", "but got 0 instead"},
      {"n -1", kChat, Chat(R"("n": -1)"), 400, "n", "an integer in [1, 2147483647]"},
      {"n above the cap", kChat, Chat(R"("n": 129)"), 400, "n",
       "Invalid 'n': at most 128 choices per request are supported, but got 129 instead. Send "
       "the choices in several requests."},
      {"n above the cap, completions", kText, Completion(R"("n": 1000)"), 400, "n",
       "at most 128 choices"},
      {"n a string", kChat, Chat(R"("n": "2")"), 400, "n", "expected an integer"},
      {"best_of 3", kText, Completion(R"("best_of": 3)"), 400, "best_of", "only 1 is supported"},
  });
}

TEST(OpenAiRequestErrorsTest, SamplingRanges) {
  ExpectErrors({
      {"temperature above 2", kChat, Chat(R"("temperature": 2.5)"), 400, "temperature",
       "Invalid 'temperature': expected a number in [0, 2], but got 2.5 instead."},
      {"temperature negative", kText, Completion(R"("temperature": -0.1)"), 400, "temperature",
       "[0, 2]"},
      {"temperature a string", kChat, Chat(R"("temperature": "hot")"), 400, "temperature",
       "Invalid type for 'temperature': expected a number, but got a string instead."},
      {"temperature a boolean", kChat, Chat(R"("temperature": true)"), 400, "temperature",
       "but got a boolean"},
      {"top_p 0", kChat, Chat(R"("top_p": 0)"), 400, "top_p", "expected a number in (0, 1]"},
      {"top_p above 1", kText, Completion(R"("top_p": 1.01)"), 400, "top_p", "(0, 1]"},
      {"top_k -2", kChat, Chat(R"("top_k": -2)"), 400, "top_k", "an integer in [-1, 1000]"},
      {"top_k above vocab", kChat, Chat(R"("top_k": 1001)"), 400, "top_k", "[-1, 1000]"},
      {"top_k fractional", kChat, Chat(R"("top_k": 2.5)"), 400, "top_k", "expected an integer"},
      {"min_p above 1", kChat, Chat(R"("min_p": 1.5)"), 400, "min_p", "[0, 1]"},
      {"presence_penalty", kChat, Chat(R"("presence_penalty": 2.5)"), 400, "presence_penalty",
       "[-2, 2]"},
      {"frequency_penalty", kText, Completion(R"("frequency_penalty": -3)"), 400,
       "frequency_penalty", "[-2, 2]"},
      {"repetition_penalty 0", kChat, Chat(R"("repetition_penalty": 0)"), 400, "repetition_penalty",
       "(0, 2]"},
      {"seed a string", kChat, Chat(R"("seed": "1")"), 400, "seed", "expected an integer"},
      {"seed fractional", kChat, Chat(R"("seed": 1.5)"), 400, "seed", "[-2^63, 2^64-1]"},
      {"ignore_eos a number", kChat, Chat(R"("ignore_eos": 1)"), 400, "ignore_eos",
       "expected a boolean"},
      {"speculative a string", kChat, Chat(R"("speculative": "off")"), 400, "speculative",
       "expected a boolean"},
      {"speculative a number", kText, Completion(R"("speculative": 0)"), 400, "speculative",
       "expected a boolean"},
  });
}

TEST(OpenAiRequestErrorsTest, StopAndTokenIds) {
  std::string seventeen = "[";
  for (int i = 0; i < 17; ++i)
    seventeen += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  seventeen += "]";
  ExpectErrors({
      {"stop a number", kChat, Chat(R"("stop": 5)"), 400, "stop",
       "expected a string or an array of strings"},
      {"stop empty string", kChat, Chat(R"("stop": "")"), 400, "stop", "a non-empty stop string"},
      {"stop element empty", kText, Completion(R"("stop": ["a", ""])"), 400, "stop[1]",
       "a non-empty stop string"},
      {"stop element a number", kChat, Chat(R"("stop": ["a", 1])"), 400, "stop[1]",
       "Invalid type for 'stop[1]': expected a string"},
      {"17 stop strings", kChat, Chat("\"stop\": " + seventeen), 400, "stop",
       "at most 16 stop sequences are supported, but got 17"},
      {"stop_token_ids not an array", kChat, Chat(R"("stop_token_ids": 5)"), 400, "stop_token_ids",
       "expected an array of token ids"},
      {"stop_token_ids negative", kChat, Chat(R"("stop_token_ids": [1, -1])"), 400,
       "stop_token_ids[1]", "a token id of this model, in [0, 999]"},
      {"stop_token_ids past vocab", kText, Completion(R"("stop_token_ids": [1000])"), 400,
       "stop_token_ids[0]", "in [0, 999], but got 1000"},
  });
}

TEST(OpenAiRequestErrorsTest, StreamingLogprobsAndUnsupported) {
  ExpectErrors({
      {"stream a string", kChat, Chat(R"("stream": "yes")"), 400, "stream", "expected a boolean"},
      {"stream_options without stream", kChat, Chat(R"("stream_options": {"include_usage": true})"),
       400, "stream_options", "only allowed when 'stream' is true"},
      {"stream_options not an object", kText, Completion(R"("stream": true, "stream_options": 1)"),
       400, "stream_options", "expected an object"},
      {"include_usage a string", kChat,
       Chat(R"("stream": true, "stream_options": {"include_usage": "y"})"), 400,
       "stream_options.include_usage", "Invalid type for 'stream_options.include_usage'"},
      {"chat logprobs an integer", kChat, Chat(R"("logprobs": 1)"), 400, "logprobs",
       "expected a boolean, but got an integer"},
      {"top_logprobs 21", kChat, Chat(R"("logprobs": true, "top_logprobs": 21)"), 400,
       "top_logprobs", "an integer in [0, 20]"},
      {"top_logprobs without logprobs", kChat, Chat(R"("top_logprobs": 2)"), 400, "top_logprobs",
       "needs 'logprobs'"},
      {"completion logprobs a boolean", kText, Completion(R"("logprobs": true)"), 400, "logprobs",
       "expected an integer, but got a boolean"},
      {"completion logprobs 21", kText, Completion(R"("logprobs": 21)"), 400, "logprobs",
       "[0, 20]"},
      {"completion logprobs -1", kText, Completion(R"("logprobs": -1)"), 400, "logprobs",
       "[0, 20]"},
      {"echo a string", kText, Completion(R"("echo": "yes")"), 400, "echo", "expected a boolean"},
      {"logit_bias id past the vocabulary", kChat, Chat(R"("logit_bias": {"1000": 10})"), 400,
       "logit_bias", "'1000' is not a token id of this model"},
      {"logit_bias key not a number", kChat, Chat(R"("logit_bias": {"hi": 10})"), 400, "logit_bias",
       "keys must be token ids in [0, 999]"},
      {"logit_bias 101", kChat, Chat(R"("logit_bias": {"5": 101})"), 400, "logit_bias.5",
       "[-100, 100]"},
      {"logit_bias a list", kText, Completion(R"("logit_bias": [5])"), 400, "logit_bias",
       "an object of token id -> bias"},
      {"tool without a function", kChat, Chat(R"("tools": [{"type": "function"}])"), 400,
       "tools[0].function", "Missing required parameter"},
      {"tools an object", kChat, Chat(R"("tools": {"type": "function"})"), 400, "tools",
       "expected an array of tools"},
      {"tool type", kChat, Chat(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])"),
       400, "tools[0].type", "\"function\""},
      {"tool name with a space", kChat,
       Chat(R"("tools": [{"type": "function", "function": {"name": "get weather"}}])"), 400,
       "tools[0].function.name", "1 to 64 letters"},
      {"tool parameters a string", kChat,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])"),
       400, "tools[0].function.parameters", "a JSON schema object"},
      {"two tools with one name", kChat,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f"}},
                         {"type": "function", "function": {"name": "f"}}])"),
       400, "tools[1].function.name", "names must differ"},
      {"tool_choice names another tool", kChat,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f"}}],
               "tool_choice": {"type": "function", "function": {"name": "g"}})"),
       400, "tool_choice.function.name", "No tool named 'g'"},
      {"tool_choice unknown", kChat,
       Chat(R"("tools": [{"type": "function", "function": {"name": "f"}}],
               "tool_choice": "always")"),
       400, "tool_choice", "\"required\""},
      {"deprecated functions", kChat, Chat(R"("functions": [{"name": "f"}])"), 400, "functions",
       "send 'tools' instead"},
      {"kwarg that the server sets", kChat, Chat(R"("chat_template_kwargs": {"tools": []})"), 400,
       "chat_template_kwargs.tools", "set by the server"},
      {"response_format type xml", kChat, Chat(R"("response_format": {"type": "xml"})"), 400,
       "response_format.type", "use 'text', 'json_object' or 'json_schema'"},
      {"json_schema missing", kChat, Chat(R"("response_format": {"type": "json_schema"})"), 400,
       "response_format.json_schema", "Missing required parameter"},
      {"json_schema unknown field", kChat,
       Chat(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "x": 1}})"),
       400, "response_format.json_schema.x", "Unrecognized"},
      {"suffix", kText, Completion(R"("suffix": "end")"), 400, "suffix", "fill-in-the-middle"},
      {"user a number", kChat, Chat(R"("user": 7)"), 400, "user", "expected a string"},
      {"chat_template_kwargs.enable_thinking", kChat,
       Chat(R"("chat_template_kwargs": {"enable_thinking": "no"})"), 400,
       "chat_template_kwargs.enable_thinking", "expected a boolean"},
  });
}

// A parameter this server does not know is a 400 naming it, never silently ignored (a typo such
// as "temprature" would otherwise sample at the default temperature).
TEST(OpenAiRequestErrorsTest, UnknownParametersAreRefused) {
  ExpectErrors({
      {"misspelt temperature", kChat, Chat(R"("temprature": 1.9)"), 400, "temprature",
       "Unrecognized request argument supplied: temprature"},
      {"vLLM guided decoding", kChat, Chat(R"("guided_json": {"type": "object"})"), 400,
       "guided_json", "Unrecognized request argument"},
      {"llama.cpp grammar", kText, Completion(R"("grammar": "root ::= x")"), 400, "grammar",
       "Unrecognized request argument"},
      {"predicted outputs", kChat, Chat(R"("prediction": {"type": "content", "content": "x"})"),
       400, "prediction", "Unrecognized request argument"},
      {"web search", kChat, Chat(R"("web_search_options": {})"), 400, "web_search_options",
       "Unrecognized request argument"},
      {"a chat field on completions", kText, Completion(R"("max_completion_tokens": 5)"), 400,
       "max_completion_tokens", "Unrecognized request argument"},
      {"a forced tool without tools", kChat, Chat(R"("tool_choice": "required")"), 400,
       "tool_choice", "'tool_choice' needs 'tools'"},
      {"unknown stream option", kChat,
       Chat(R"("stream": true, "stream_options": {"include_usage": true, "chunk": 1})"), 400,
       "stream_options.chunk", "Unrecognized request argument supplied: stream_options.chunk"},
  });
}

TEST(OpenAiRequestErrorsTest, BookkeepingFieldsAndEveryReadFieldPass) {
  const std::string chat = Chat(
      R"("metadata": {"a": "b"}, "store": false, "service_tier": "auto",
          "parallel_tool_calls": true, "user": "u", "max_tokens": 4, "max_completion_tokens": 5,
          "temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1, "presence_penalty": 0.1,
          "frequency_penalty": 0.1, "repetition_penalty": 1.1, "seed": 3, "stop": ["x"],
          "stop_token_ids": [1], "ignore_eos": false, "speculative": true, "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
          "n": 1, "logit_bias": {}, "tools": [], "response_format": {"type": "text"},
          "chat_template_kwargs": {"enable_thinking": false, "custom_var": 1})");
  auto c = ParseChatCompletionRequest(chat, Options());
  EXPECT_TRUE(c.ok()) << c.error().message;
  const std::string text = Completion(
      R"("max_tokens": 4, "echo": true, "logprobs": 2, "suffix": "", "best_of": 1,
          "metadata": {}, "temperature": 0, "stream": false)");
  auto t = ParseCompletionRequest(text, Options());
  EXPECT_TRUE(t.ok()) << t.error().message;
}

TEST(OpenAiRequestErrorsTest, Prompt) {
  ExpectErrors({
      {"missing prompt", kText, R"({"model": "m"})", 400, "prompt",
       "Missing required parameter: 'prompt'."},
      {"null prompt", kText, CompletionPrompt("null"), 400, "prompt", "Missing required"},
      {"empty string", kText, CompletionPrompt(R"("")"), 400, "prompt", "the prompt is empty"},
      {"empty array", kText, CompletionPrompt("[]"), 400, "prompt", "the prompt is empty"},
      {"second of two strings empty", kText, CompletionPrompt(R"(["a", ""])"), 400, "prompt[1]",
       "the prompt is empty"},
      {"second token array past vocab", kText, CompletionPrompt("[[1], [2, 1000]]"), 400,
       "prompt[1][1]", "but got 1000 instead"},
      {"a string beside token arrays", kText, CompletionPrompt(R"([[1], 2])"), 400, "prompt[1]",
       "expected a string or an array of token ids, but got an integer"},
      {"129 prompts", kText, CompletionPrompt(PromptList(129)), 400, "prompt",
       "Invalid 'prompt': 129 prompts with n = 1 make 129 choices, more than the 128 one request "
       "may have. Send the prompts in several requests."},
      {"65 prompts times n 2", kText, R"({"model": "m", "n": 2, "prompt": )" + PromptList(65) + "}",
       400, "prompt", "65 prompts with n = 2 make 130 choices"},
      {"one empty string", kText, CompletionPrompt(R"([""])"), 400, "prompt[0]",
       "the prompt is empty"},
      {"one empty token array", kText, CompletionPrompt("[[]]"), 400, "prompt[0]",
       "the prompt is empty"},
      {"mixed ids and string", kText, CompletionPrompt(R"([1, "a"])"), 400, "prompt[1]",
       "expected an integer token id, but got a string"},
      {"negative id", kText, CompletionPrompt("[1, -1]"), 400, "prompt[1]",
       "a token id of this model, in [0, 999]"},
      {"id past vocab", kText, CompletionPrompt("[1, 1000]"), 400, "prompt[1]",
       "but got 1000 instead"},
      {"nested id past vocab", kText, CompletionPrompt("[[3, 5000]]"), 400, "prompt[0][1]",
       "but got 5000 instead"},
      {"fractional id", kText, CompletionPrompt("[1.5]"), 400, "prompt[0]",
       "expected an integer token id, but got a number"},
      {"prompt a number", kText, CompletionPrompt("5"), 400, "prompt",
       "expected a string or an array of token ids, but got an integer"},
      {"prompt an object in an array", kText, CompletionPrompt("[{}]"), 400, "prompt[0]",
       "but got an object"},
  });
}

// Strings built in code (not parsed from text) can carry any bytes; the FromJson entry points
// check them too, and name the field.
TEST(OpenAiRequestErrorsTest, InvalidUtf8InAlreadyParsedDocuments) {
  nlohmann::json completion = {{"model", "m"}, {"prompt", std::string("ok\xFF")}};
  auto c = CompletionRequestFromJson(completion, Options());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().param, "prompt");
  EXPECT_NE(c.error().message.find("is not valid UTF-8 (invalid lead byte"), std::string::npos);

  nlohmann::json chat = {{"model", "m"},
                         {"messages", {{{"role", "user"}, {"content", "\xED\xA0\x80"}}}}};
  auto r = ChatCompletionRequestFromJson(chat, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().param, "messages[0].content");
  EXPECT_NE(r.error().message.find("UTF-16 surrogate at byte 0"), std::string::npos);

  chat = {{"model", "m"},
          {"messages", {{{"role", "user"}, {"content", "x"}}}},
          {"stop", {"fine", "\xC3"}}};
  r = ChatCompletionRequestFromJson(chat, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().param, "stop[1]");
  EXPECT_NE(r.error().message.find("truncated sequence"), std::string::npos);

  chat = {{"model", std::string("m\xC0\x80")},
          {"messages", {{{"role", "user"}, {"content", "x"}}}}};
  r = ChatCompletionRequestFromJson(chat, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().param, "model");
  // The error body itself must still be valid JSON a client can read.
  EXPECT_NO_THROW(nlohmann::json::parse(r.error().ToJson()));
}

TEST(OpenAiRequestErrorsTest, ErrorBodyHasOpenAisShape) {
  auto r = ParseChatCompletionRequest(Chat(R"("temperature": 3)"), Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().ToJson(),
            R"({"error":{"message":"Invalid 'temperature': expected a number in [0, 2], but got )"
            R"(3 instead.","type":"invalid_request_error","param":"temperature","code":null}})");
  auto body = ParseChatCompletionRequest("{", Options());
  ASSERT_FALSE(body.ok());
  EXPECT_NE(body.error().ToJson().find(R"("param":null,"code":null)"), std::string::npos);
}

}  // namespace
}  // namespace dq::router
