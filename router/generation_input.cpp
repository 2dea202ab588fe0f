#include "router/generation_input.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/grammar/json_schema_compiler.h"
#include "nlohmann/json.hpp"
#include "router/forced_tool_call.h"

namespace dq::router {
namespace {

namespace v1 = dqserve::v1;
using nlohmann::json;

void SamplingJson(const v1::SamplingParams& s, bool chat, json& body) {
  if (s.has_temperature()) body["temperature"] = s.temperature();
  if (s.has_top_p()) body["top_p"] = s.top_p();
  if (s.has_top_k()) body["top_k"] = s.top_k();
  if (s.has_min_p()) body["min_p"] = s.min_p();
  if (s.has_seed()) body["seed"] = s.seed();
  if (s.has_max_tokens()) body["max_tokens"] = s.max_tokens();
  if (s.stop_size() > 0)
    body["stop"] = json(std::vector<std::string>(s.stop().begin(), s.stop().end()));
  if (s.stop_token_ids_size() > 0) {
    body["stop_token_ids"] =
        json(std::vector<int32_t>(s.stop_token_ids().begin(), s.stop_token_ids().end()));
  }
  if (s.has_presence_penalty()) body["presence_penalty"] = s.presence_penalty();
  if (s.has_frequency_penalty()) body["frequency_penalty"] = s.frequency_penalty();
  if (s.has_repetition_penalty()) body["repetition_penalty"] = s.repetition_penalty();
  if (s.ignore_eos()) body["ignore_eos"] = true;
  if (s.logit_bias_size() > 0) {
    json bias = json::object();
    for (const auto& [id, b] : s.logit_bias()) bias[std::to_string(id)] = b;
    body["logit_bias"] = std::move(bias);
  }
  if (s.min_tokens() > 0) body["min_tokens"] = s.min_tokens();
  if (s.logprobs()) {
    if (chat) {
      body["logprobs"] = true;
      body["top_logprobs"] = s.top_logprobs();
    } else {
      body["logprobs"] = s.top_logprobs();
    }
  } else if (s.top_logprobs() > 0) {
    // Let the parser explain that alternatives need logprobs.
    body["top_logprobs"] = s.top_logprobs();
  }
}

// A schema the workers would refuse is a 400 here, before any worker runs, naming where it came
// from (`schema_param`: "response_format", or "tools" for a forced call); min_tokens must fit in
// the tokens the request may generate.
std::optional<ApiError> CheckConstraints(const SamplingOptions& s, int max_tokens,
                                         const std::string& schema_param = "response_format") {
  if (!s.json_schema.empty()) {
    absl::StatusOr<grammar::Grammar> g = grammar::CompileJsonSchema(s.json_schema);
    if (!g.ok()) {
      return InvalidRequest(
          schema_param, absl::StrCat("Invalid '", schema_param, "': ", g.status().message(), "."));
    }
    if (s.ignore_eos) {
      return InvalidRequest(
          "ignore_eos",
          absl::StrCat("'ignore_eos' cannot be combined with ",
                       schema_param == "tools" ? "a forced tool call ('tool_choice' \"required\" "
                                                 "or a named function)"
                                               : "a JSON 'response_format'",
                       ": the output ends with EOS once its document is "
                       "complete."));
    }
  }
  if (s.min_tokens > max_tokens) {
    return InvalidRequest("min_tokens",
                          absl::StrCat("Invalid 'min_tokens': ", s.min_tokens, " is more than the ",
                                       max_tokens, " tokens this request may generate."));
  }
  return std::nullopt;
}

// What a forced call (tool_choice "required" or a function) cannot be combined with.
std::optional<ApiError> CheckForcedCall(const ChatCompletionRequest& request,
                                        const ServedModel& model) {
  if (!request.sampling.json_schema.empty()) {
    return InvalidRequest("response_format",
                          "'response_format' json_object / json_schema cannot be combined with "
                          "tool_choice \"required\" or a named function: the forced call is "
                          "the answer's JSON. Send one of them.");
  }
  if (model.tool_call_format != ToolCallFormat::kHermes) {
    return InvalidRequest(
        "tool_choice",
        absl::StrCat("tool_choice \"required\" or a named function is supported for models with "
                     "the hermes tool-call format (Qwen, Hermes) only; the model '",
                     model.name, "' uses ",
                     std::string(ToolCallFormatName(*model.tool_call_format)),
                     ". Send tool_choice \"auto\"."));
  }
  return std::nullopt;
}

}  // namespace

ApiResult<GenerationInput> ChatGeneration(const ChatCompletionRequest& request,
                                          const ServedModel& model, bool add_generation_prompt) {
  const ChatRenderOptions opts = ChatRenderOptionsFor(request, add_generation_prompt);
  const bool tools = !opts.tools.is_null();
  if (tools && !model.tool_call_format) {
    return InvalidRequest(
        "tools", absl::StrCat("The model '", model.name,
                              "' has no tool-call format this server recognises in its chat "
                              "template, so its tool calls cannot be read from its output. Start "
                              "the router with --tool-call-parser hermes|llama3_json|mistral (the "
                              "model family's format), or send tool_choice \"none\"."));
  }
  const bool forced = tools && ForcesToolCall(request);
  if (forced) {
    if (std::optional<ApiError> bad = CheckForcedCall(request, model)) return *bad;
  }
  ApiResult<std::vector<int32_t>> prompt = model.ChatPrompt(request.messages, opts);
  if (!prompt.ok()) return prompt.error();
  const int n = static_cast<int>(prompt->size());
  ApiResult<int> max_tokens = ResolveMaxTokens(request.sampling.max_tokens, n, model.max_context,
                                               ApiEndpoint::kChatCompletions);
  if (!max_tokens.ok()) return max_tokens.error();
  GenerationInput in;
  in.prompt_ids = std::move(prompt).value();
  in.sampling = request.sampling;
  in.max_tokens = *max_tokens;
  in.logprobs = request.logprobs;
  in.top_logprobs = request.logprobs ? request.top_logprobs : 0;
  // The parser needs the markers even where they are special tokens.
  if (tools) in.keep_special_ids = model.tool_marker_ids;
  // A forced call: the answer is the call object, held to its schema (router/forced_tool_call.h).
  if (forced) in.sampling.json_schema = ForcedToolCallSchema(request);
  if (std::optional<ApiError> bad =
          CheckConstraints(in.sampling, in.max_tokens, forced ? "tools" : "response_format")) {
    return *bad;
  }
  return in;
}

ApiResult<GenerationInput> CompletionGeneration(const CompletionRequest& request,
                                                const ServedModel& model) {
  std::vector<int32_t> prompt = model.CompletionPrompt(request);
  if (prompt.empty()) {
    return InvalidRequest("prompt", "The prompt tokenizes to no tokens; send a non-empty prompt.");
  }
  const int n = static_cast<int>(prompt.size());
  ApiResult<int> max_tokens = ResolveMaxTokens(request.sampling.max_tokens, n, model.max_context,
                                               ApiEndpoint::kCompletions);
  if (!max_tokens.ok()) return max_tokens.error();
  GenerationInput in;
  in.prompt_ids = std::move(prompt);
  in.sampling = request.sampling;
  in.max_tokens = *max_tokens;
  in.logprobs = request.logprobs.has_value();
  in.top_logprobs = request.logprobs.value_or(0);
  in.prompt_logprobs = request.echo && in.logprobs;
  if (std::optional<ApiError> bad = CheckConstraints(in.sampling, in.max_tokens)) return *bad;
  return in;
}

ApiResult<GenerationInput> GenerationFromProto(const v1::GenerateRequest& request,
                                               const ServedModel& model,
                                               const ParseOptions& options) {
  json body = json::object();
  if (!request.model().empty()) body["model"] = request.model();
  const bool chat = request.input_case() == v1::GenerateRequest::kChat;
  SamplingJson(request.sampling(), chat, body);
  if (request.has_speculative()) body["speculative"] = request.speculative();
  switch (request.input_case()) {
    case v1::GenerateRequest::kChat: {
      json messages = json::array();
      for (const v1::ChatMessage& m : request.chat().messages()) {
        messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      body["messages"] = std::move(messages);
      ApiResult<ChatCompletionRequest> parsed = ChatCompletionRequestFromJson(body, options);
      if (!parsed.ok()) return parsed.error();
      ChatCompletionRequest r = std::move(parsed).value();
      r.sampling.json_schema = request.sampling().json_schema();  // as sent: key order kept
      return ChatGeneration(r, model, request.chat().add_generation_prompt());
    }
    case v1::GenerateRequest::kPrompt:
      body["prompt"] = request.prompt();
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      body["prompt"] = json(std::vector<int32_t>(request.prompt_token_ids().ids().begin(),
                                                 request.prompt_token_ids().ids().end()));
      break;
    default:
      return InvalidRequest("input", "Set exactly one input: prompt, chat or prompt_token_ids.");
  }
  ApiResult<CompletionRequest> parsed = CompletionRequestFromJson(body, options);
  if (!parsed.ok()) return parsed.error();
  CompletionRequest c = std::move(parsed).value();
  if (!request.sampling().has_max_tokens()) c.sampling.max_tokens.reset();
  c.sampling.json_schema = request.sampling().json_schema();
  return CompletionGeneration(c, model);
}

}  // namespace dq::router
