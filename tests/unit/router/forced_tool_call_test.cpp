// tool_choice "required" / a named function: the request's sampling schema (compared with
// schemas written out by hand), the combinations refused with a 400, and the answer (the call
// object alone) read back as one call.
#include "router/forced_tool_call.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/generation_input.h"
#include "router/tool_call_stream.h"
#include "tests/unit/router/router_test_model.h"

namespace dq::router {
namespace {

using ojson = nlohmann::ordered_json;

constexpr char kWeather[] =
    R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}})";
constexpr char kTime[] = R"({"type": "function", "function": {"name": "get_time"}})";

ServedModel HermesModel() {
  ServedModel m = TestModel(4096);
  m.SetToolCallFormat(ToolCallFormat::kHermes);
  return m;
}

ApiResult<ChatCompletionRequest> Parse(const std::string& tools, const std::string& extra) {
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather?"}], "tools": [)" +
                           tools + "], " + extra + "}";
  return ParseChatCompletionRequest(body, ParseOptions{});
}

// The sampling schema ChatGeneration gives the request (empty when it is refused).
std::string SchemaOf(const std::string& tools, const std::string& extra) {
  ApiResult<ChatCompletionRequest> r = Parse(tools, extra);
  EXPECT_TRUE(r.ok()) << r.error().message;
  if (!r.ok()) return "";
  ApiResult<GenerationInput> in = ChatGeneration(*r, HermesModel());
  EXPECT_TRUE(in.ok()) << in.error().message;
  return in.ok() ? in->sampling.json_schema : "";
}

const char kWeatherCall[] =
    R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}},
        "required":["name","arguments"],"additionalProperties":false})";
const char kTimeCall[] =
    R"({"type":"object","properties":{"name":{"const":"get_time"},"arguments":{"type":"object"}},
        "required":["name","arguments"],"additionalProperties":false})";

TEST(ForcedToolCallTest, ANamedFunctionIsTheSchemaOfItsCall) {
  const std::string tools = std::string(kWeather) + ", " + kTime;
  // Key order matters (the grammar emits properties in schema order), so compare the text.
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": {"type": "function", "function":
                                {"name": "get_weather"}})"),
            ojson::parse(kWeatherCall).dump());
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": {"type": "function", "function":
                                {"name": "get_time"}})"),
            ojson::parse(kTimeCall).dump());
}

TEST(ForcedToolCallTest, RequiredIsAnyOfTheToolsCallsEvenWithParallelCalls) {
  const std::string tools = std::string(kWeather) + ", " + kTime;
  const std::string any =
      ojson{{"anyOf", {ojson::parse(kWeatherCall), ojson::parse(kTimeCall)}}}.dump();
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": "required")"), any);
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": "required", "parallel_tool_calls": true)"), any);
  // One tool: its call, not an anyOf of one.
  EXPECT_EQ(SchemaOf(kWeather, R"("tool_choice": "required")"), ojson::parse(kWeatherCall).dump());
  // auto and none constrain nothing.
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": "auto")"), "");
  EXPECT_EQ(SchemaOf(tools, R"("tool_choice": "none")"), "");
}

TEST(ForcedToolCallTest, RefsInParametersAreRebasedToWhereTheParametersSit) {
  const std::string with_refs =
      R"({"type": "function", "function": {"name": "book", "parameters": {"type": "object",
          "properties": {"city": {"$ref": "#/$defs/city"}, "again": {"$ref": "#"},
                         "tag": {"const": {"$ref": "#/kept"}}},
          "$defs": {"city": {"type": "string"}}}}})";
  ojson one = ojson::parse(SchemaOf(with_refs, R"("tool_choice": "required")"));
  ojson& props = one["properties"]["arguments"]["properties"];
  EXPECT_EQ(props["city"]["$ref"], "#/properties/arguments/$defs/city");
  EXPECT_EQ(props["again"]["$ref"], "#/properties/arguments");
  EXPECT_EQ(props["tag"]["const"]["$ref"], "#/kept");  // data, not a reference
  ojson two =
      ojson::parse(SchemaOf(std::string(kTime) + ", " + with_refs, R"("tool_choice": "required")"));
  EXPECT_EQ(two["anyOf"][1]["properties"]["arguments"]["properties"]["city"]["$ref"],
            "#/anyOf/1/properties/arguments/$defs/city");
}

// The 400 ChatGeneration gives, or http_status 0 when the request passes.
ApiError Refusal(const ServedModel& m, const std::string& tools, const std::string& extra) {
  ApiResult<ChatCompletionRequest> r = Parse(tools, extra);
  if (!r.ok()) return r.error();
  ApiResult<GenerationInput> in = ChatGeneration(*r, m);
  if (!in.ok()) return in.error();
  ApiError passed;
  passed.http_status = 0;
  return passed;
}

TEST(ForcedToolCallTest, WhatCannotBeCombinedIsRefusedNamingTheField) {
  const ServedModel hermes = HermesModel();
  const std::string required = R"("tool_choice": "required")";
  struct Case {
    std::string extra;
    std::string param;
    std::string words;
  };
  const std::vector<Case> cases = {
      {required + R"(, "response_format": {"type": "json_object"})", "response_format",
       "cannot be combined with tool_choice"},
      {required + R"(, "ignore_eos": true)", "ignore_eos", "tool_choice"},
  };
  for (const Case& c : cases) {
    const ApiError e = Refusal(hermes, kWeather, c.extra);
    EXPECT_EQ(e.http_status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra;
    EXPECT_NE(e.message.find(c.words), std::string::npos) << e.message;
  }
  // A parameters schema the grammar cannot honour is the tools' fault, not response_format's.
  const ApiError pattern =
      Refusal(hermes,
              R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"x": {"type": "string", "pattern": "a+"}}}}})",
              required);
  EXPECT_EQ(pattern.http_status, 400);
  EXPECT_EQ(pattern.param, "tools");
  EXPECT_NE(pattern.message.find("pattern"), std::string::npos) << pattern.message;
  // Other formats: their models are not held to the bare call object.
  for (ToolCallFormat f : {ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    ServedModel m = HermesModel();
    m.SetToolCallFormat(f);
    const ApiError e = Refusal(m, kWeather, required);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_EQ(e.param, "tool_choice");
    EXPECT_NE(e.message.find(std::string(ToolCallFormatName(f))), std::string::npos) << e.message;
    EXPECT_EQ(Refusal(m, kWeather, R"("tool_choice": "auto")").http_status, 0);
  }
}

std::vector<Delta> Pieces(const std::vector<std::string>& texts) {
  std::vector<Delta> deltas;
  for (const std::string& t : texts) {
    Delta d;
    d.text = t;
    deltas.push_back(std::move(d));
  }
  return deltas;
}

TEST(ForcedToolCallTest, TheWholeAnswerIsOneCall) {
  ApiResult<ChatCompletionRequest> r = Parse(
      kWeather, R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const ServedModel m = HermesModel();
  const std::vector<Delta> deltas =
      Pieces({R"({"name":)", R"( "get_weather", "argu)", R"(ments": {"city": "a;}b"}})"});
  ToolCallStream whole = ToolCallStream::For(*r, m);
  ChatChoice choice;
  for (const Delta& d : deltas) whole.Add(d, &choice);
  whole.Finish(FinishReason::kStop, &choice);
  ASSERT_EQ(choice.tool_calls.size(), 1u);
  EXPECT_EQ(choice.tool_calls[0].name, "get_weather");
  EXPECT_EQ(choice.tool_calls[0].arguments, R"({"city":"a;}b"})");
  EXPECT_EQ(choice.tool_calls[0].id.size(), 29u);
  EXPECT_EQ(choice.content, "");
  EXPECT_EQ(choice.finish_reason, FinishReason::kToolCalls);

  // Streamed: nothing until the generation ends, then the call and the finish chunk.
  ToolCallStream streamed = ToolCallStream::For(*r, m);
  ChatCompletionStream stream(ResponseHeader{"chatcmpl-x", 1, "tiny"}, false, false);
  for (const Delta& d : deltas) EXPECT_EQ(streamed.Events(d, {}, stream), "");
  const std::string end = streamed.FinishEvents(FinishReason::kStop, stream);
  EXPECT_NE(end.find(R"("name":"get_weather")"), std::string::npos) << end;
  EXPECT_NE(end.find(R"("finish_reason":"tool_calls")"), std::string::npos) << end;

  // Cut by max_tokens: the unfinished object is content, and the answer "length".
  ToolCallStream cut = ToolCallStream::For(*r, m);
  ChatChoice partial;
  cut.Add(deltas[0], &partial);
  cut.Finish(FinishReason::kLength, &partial);
  EXPECT_TRUE(partial.tool_calls.empty());
  EXPECT_EQ(partial.content, R"({"name":)");
  EXPECT_EQ(partial.finish_reason, FinishReason::kLength);
}

}  // namespace
}  // namespace dq::router
