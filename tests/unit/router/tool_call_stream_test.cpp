// Model output holding tool calls, as token ids of the Qwen-style test tokenizer, through the
// objects the HTTP front end uses (OutputAssembler -> ToolCallStream -> the response builders):
// the whole answer's JSON and the event stream's chunks.
#include "router/tool_call_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/generation_input.h"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

using nlohmann::json;

constexpr char kCall[] =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";

// The test tokenizer with `markers` as special added tokens (by default <tool_call> and
// </tool_call>, as real Qwen vocabularies add them; Llama's and Mistral's markers are special
// there too).
Tokenizer ToolTokenizer(std::vector<std::string> markers = {"<tool_call>", "</tool_call>"}) {
  std::ifstream f(std::string(DQ_SOURCE_DIR) + "/tests/golden/tokenizer/qwen-style/tokenizer.json");
  json j = json::parse(std::string(std::istreambuf_iterator<char>(f), {}));
  int next = 0;
  for (const json& t : j["added_tokens"]) next = std::max(next, t["id"].get<int>() + 1);
  for (const std::string& marker : markers) {
    j["added_tokens"].push_back({{"id", next++},
                                 {"content", marker},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  absl::StatusOr<Tokenizer> tok = Tokenizer::FromHfJsonString(j.dump());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *tok : Tokenizer();
}

ServedModel ToolModel() {
  ServedModel m = TestModel(4096);
  m.tokenizer = ToolTokenizer();
  m.vocab_size = m.tokenizer.vocab_size();
  m.SetToolCallFormat(ToolCallFormat::kHermes);
  return m;
}

// The deltas the decode stream would give for `text` (ending with <|im_end|>), one per token.
std::vector<Delta> Deltas(const ServedModel& m, const std::string& text,
                          std::vector<int32_t> keep_special) {
  std::vector<int32_t> ids = m.tokenizer.Encode(text, /*parse_special=*/true);
  ids.push_back(*m.tokenizer.TokenToId("<|im_end|>"));
  OutputAssembler out(m.tokenizer, {}, std::move(keep_special));
  std::vector<Delta> deltas;
  for (int32_t id : ids) {
    Delta d;
    out.Feed(id, nullptr, &d);
    deltas.push_back(std::move(d));
  }
  Delta last;
  out.Finish(&last);
  deltas.push_back(std::move(last));
  return deltas;
}

ChatChoice Whole(ToolCallStream tools, const std::vector<Delta>& deltas,
                 FinishReason generation = FinishReason::kStop) {
  ChatChoice choice;
  for (const Delta& d : deltas) tools.Add(d, &choice);
  tools.Finish(generation, &choice);
  return choice;
}

// The payloads of the streamed events after the role chunk.
std::vector<json> Streamed(ToolCallStream tools, const std::vector<Delta>& deltas,
                           FinishReason generation = FinishReason::kStop) {
  ChatCompletionStream stream(ResponseHeader{"chatcmpl-x", 1, "tiny"}, false, false);
  std::string sse;
  for (const Delta& d : deltas) sse += tools.Events(d, {}, stream);
  sse += tools.FinishEvents(generation, stream);
  std::vector<json> events;
  for (size_t at = 0; at < sse.size();) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_EQ(sse.substr(at, 6), "data: ");
    events.push_back(json::parse(sse.substr(at + 6, end - at - 6)));
    at = end + 2;
  }
  return events;
}

void ExpectWeatherCall(const json& call) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().substr(0, 5), "call_");
  EXPECT_EQ(call["id"].get<std::string>().size(), 29u);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  ASSERT_TRUE(call["function"]["arguments"].is_string());  // a JSON string, as OpenAI's
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
}

TEST(ToolCallStreamTest, TheMarkersAreSpecialTokensAndAreKept) {
  const ServedModel m = ToolModel();
  ASSERT_EQ(m.tool_marker_ids.size(), 2u);
  const std::vector<int32_t> ids = m.tokenizer.Encode(kCall, /*parse_special=*/true);
  for (int32_t marker : m.tool_marker_ids) {
    EXPECT_TRUE(m.tokenizer.IsSpecial(marker));
    EXPECT_NE(std::find(ids.begin(), ids.end(), marker), ids.end());
  }
  std::string kept;
  for (const Delta& d : Deltas(m, kCall, m.tool_marker_ids)) kept += d.text;
  EXPECT_EQ(kept, kCall);  // <|im_end|> still dropped
  std::string skipped;
  for (const Delta& d : Deltas(m, kCall, {})) skipped += d.text;
  EXPECT_EQ(skipped.find("<tool_call>"), std::string::npos);
  // Without the markers there is no call to find: the JSON stays content.
  const ChatChoice lost = Whole(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, kCall, {}));
  EXPECT_TRUE(lost.tool_calls.empty());
  EXPECT_NE(lost.content.find("get_weather"), std::string::npos);
}

TEST(ToolCallStreamTest, WholeAnswerWithTextAndACall) {
  const ServedModel m = ToolModel();
  const std::string text = std::string("I'll check the weather.\n") + kCall;
  const ChatChoice choice =
      Whole(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, text, m.tool_marker_ids));
  EXPECT_EQ(choice.content, "I'll check the weather.");
  EXPECT_EQ(choice.finish_reason, FinishReason::kToolCalls);
  const json body = json::parse(ChatCompletionJson({"chatcmpl-x", 1, "tiny"}, choice, {}));
  const json& c = body["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "I'll check the weather.");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  ExpectWeatherCall(c["message"]["tool_calls"][0]);
}

TEST(ToolCallStreamTest, OnlyCallsHaveNullContent) {
  const ServedModel m = ToolModel();
  const std::string text = std::string(kCall) + "\n" + kCall + "\n";
  const ChatChoice choice =
      Whole(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, text, m.tool_marker_ids));
  const json body = json::parse(ChatCompletionJson({"chatcmpl-x", 1, "tiny"}, choice, {}));
  const json& msg = body["choices"][0]["message"];
  EXPECT_TRUE(msg["content"].is_null());
  ASSERT_EQ(msg["tool_calls"].size(), 2u);
  ExpectWeatherCall(msg["tool_calls"][0]);
  ExpectWeatherCall(msg["tool_calls"][1]);
  EXPECT_NE(msg["tool_calls"][0]["id"], msg["tool_calls"][1]["id"]);
  // Without tools, content is a string as always, even when empty.
  const json plain = json::parse(ChatCompletionJson({"chatcmpl-x", 1, "tiny"}, ChatChoice{}, {}));
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolCallStreamTest, StreamedChunksMatchTheWholeAnswer) {
  const ServedModel m = ToolModel();
  const std::string text = std::string("Looking it up. ") + kCall + "\n" + kCall + " Done.";
  const std::vector<Delta> deltas = Deltas(m, text, m.tool_marker_ids);
  const ChatChoice whole = Whole(ToolCallStream(ToolCallFormat::kHermes), deltas);
  std::string content;
  std::vector<json> calls;
  const std::vector<json> events = Streamed(ToolCallStream(ToolCallFormat::kHermes), deltas);
  ASSERT_FALSE(events.empty());
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& c = events[i]["choices"][0];
    EXPECT_TRUE(c["finish_reason"].is_null());
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (c["delta"].contains("tool_calls")) {
      ASSERT_EQ(c["delta"]["tool_calls"].size(), 1u);
      calls.push_back(c["delta"]["tool_calls"][0]);
    }
  }
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(events.back()["choices"][0]["delta"], json::object());
  EXPECT_EQ(content, whole.content);
  // Whitespace between calls is held back, and shown only because more content follows.
  EXPECT_EQ(content, "Looking it up. \n Done.");
  ASSERT_EQ(calls.size(), 2u);
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i]["index"], i);
    ExpectWeatherCall(calls[i]);
  }
}

TEST(ToolCallStreamTest, ACallCompletedByTheEndOfTheStreamSetsTheReason) {
  // A stop string "</tool_call>" leaves the call unclosed: it is parsed only at the end, and the
  // finish chunk after it must already know.
  const ServedModel m = ToolModel();
  const std::string unclosed = std::string(kCall).substr(0, std::string(kCall).rfind('<'));
  const std::vector<json> events =
      Streamed(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, unclosed, m.tool_marker_ids));
  ASSERT_EQ(events.size(), 2u);
  ExpectWeatherCall(events[0]["choices"][0]["delta"]["tool_calls"][0]);
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ToolCallStreamTest, ACutByMaxTokensStaysLength) {
  const ServedModel m = ToolModel();
  const std::vector<Delta> deltas = Deltas(m, kCall, m.tool_marker_ids);
  EXPECT_EQ(
      Whole(ToolCallStream(ToolCallFormat::kHermes), deltas, FinishReason::kLength).finish_reason,
      FinishReason::kLength);
  const std::vector<json> events =
      Streamed(ToolCallStream(ToolCallFormat::kHermes), deltas, FinishReason::kAbort);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "abort");
  // No call: a normal stop stays "stop".
  EXPECT_EQ(Whole(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, "Hi.", m.tool_marker_ids))
                .finish_reason,
            FinishReason::kStop);
}

ChatCompletionRequest Request(const json& extra) {
  json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools",
                {{{"type", "function"},
                  {"function",
                   {{"name", "get_weather"},
                    {"parameters",
                     {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}}}};
  body.update(extra);
  ApiResult<ChatCompletionRequest> r = ChatCompletionRequestFromJson(body, ParseOptions{});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : ChatCompletionRequest{};
}

TEST(ToolCallStreamTest, TheRequestDecidesWhetherAndHowManyCallsAreParsed) {
  const ServedModel m = ToolModel();
  const std::vector<Delta> two = Deltas(m, std::string(kCall) + "\n" + kCall, m.tool_marker_ids);
  EXPECT_EQ(Whole(ToolCallStream::For(Request(json::object()), m), two).tool_calls.size(), 2u);
  const ChatChoice one =
      Whole(ToolCallStream::For(Request({{"parallel_tool_calls", false}}), m), two);
  EXPECT_EQ(one.tool_calls.size(), 1u);
  EXPECT_EQ(one.finish_reason, FinishReason::kToolCalls);
  // tool_choice "none" (and no tools at all): the text is the answer.
  for (const ChatCompletionRequest& r :
       {Request({{"tool_choice", "none"}}), Request({{"tools", nullptr}})}) {
    ToolCallStream tools = ToolCallStream::For(r, m);
    EXPECT_FALSE(tools.parsing());
    const ChatChoice text = Whole(std::move(tools), two);
    EXPECT_TRUE(text.tool_calls.empty());
    EXPECT_EQ(text.content, std::string(kCall) + "\n" + kCall);
    EXPECT_EQ(text.finish_reason, FinishReason::kStop);
  }
}

TEST(ToolCallStreamTest, ToolsNeedAKnownFormatAndKeepItsMarkers) {
  ServedModel m = ToolModel();
  ApiResult<GenerationInput> in = ChatGeneration(Request(json::object()), m);
  ASSERT_TRUE(in.ok()) << in.error().message;
  EXPECT_EQ(in->keep_special_ids, m.tool_marker_ids);
  ApiResult<GenerationInput> none = ChatGeneration(Request({{"tool_choice", "none"}}), m);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->keep_special_ids.empty());

  m.SetToolCallFormat(std::nullopt);  // --tool-call-parser none, or an unknown template
  EXPECT_TRUE(m.tool_marker_ids.empty());
  ApiResult<GenerationInput> refused = ChatGeneration(Request(json::object()), m);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().http_status, 400);
  EXPECT_EQ(refused.error().param, "tools");
  EXPECT_NE(refused.error().message.find("--tool-call-parser"), std::string::npos);
  EXPECT_TRUE(ChatGeneration(Request({{"tool_choice", "none"}}), m).ok());
  EXPECT_TRUE(ChatGeneration(Request({{"tools", nullptr}}), m).ok());
}

TEST(ToolCallStreamTest, LlamaAndMistralMarkersAreKeptToo) {
  struct Case {
    ToolCallFormat format;
    std::vector<std::string> markers;
    std::string text;
    size_t id_size;
  };
  const Case cases[] = {
      {ToolCallFormat::kLlama3Json,
       {"<|python_tag|>"},
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
       29},
      {ToolCallFormat::kMistral,
       {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"},
       "[TOOL_CALLS]get_weather[CALL_ID]abcdefghi[ARGS]{\"city\": \"Paris\"}",
       9},
  };
  for (const Case& c : cases) {
    ServedModel m = TestModel(4096);
    m.tokenizer = ToolTokenizer(c.markers);
    m.SetToolCallFormat(c.format);
    ASSERT_EQ(m.tool_marker_ids.size(), c.markers.size()) << ToolCallFormatName(c.format);
    const ChatChoice kept = Whole(ToolCallStream(c.format), Deltas(m, c.text, m.tool_marker_ids));
    ASSERT_EQ(kept.tool_calls.size(), 1u) << c.text;
    EXPECT_EQ(kept.tool_calls[0].name, "get_weather");
    EXPECT_EQ(kept.tool_calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(kept.tool_calls[0].id.size(), c.id_size);
    EXPECT_EQ(kept.content, "");
    EXPECT_EQ(kept.finish_reason, FinishReason::kToolCalls);
    // The markers skipped as other special tokens are: Mistral's call is lost (Llama's bare
    // JSON is a call of its own).
    if (c.format == ToolCallFormat::kMistral) {
      EXPECT_TRUE(Whole(ToolCallStream(c.format), Deltas(m, c.text, {})).tool_calls.empty());
    }
  }
}

TEST(ToolCallStreamTest, MarkersThatAreTextNeedNoIds) {
  ServedModel m = TestModel(4096);  // the test tokenizer itself: <tool_call> is ordinary text
  m.SetToolCallFormat(ToolCallFormat::kHermes);
  EXPECT_TRUE(m.tool_marker_ids.empty());
  const ChatChoice choice = Whole(ToolCallStream(ToolCallFormat::kHermes), Deltas(m, kCall, {}));
  ASSERT_EQ(choice.tool_calls.size(), 1u);
  EXPECT_EQ(choice.tool_calls[0].name, "get_weather");
  EXPECT_EQ(choice.content, "");
}

}  // namespace
}  // namespace dq::router
