// The router's own typed requests for the OpenAI-compatible API. The router never links engine/
// (DESIGN.md: it knows tokens and requests, never tensors), so SamplingOptions mirrors
// engine/sampler/sampling_params.h field for field; whoever sends a request to a worker copies
// the fields across. Keep the two in step when either changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/chat_template.h"

namespace dq::router {

enum class ApiEndpoint { kChatCompletions, kCompletions };

// Why a choice stopped. kStop: EOS, a stop token id or a stop string; kLength: max_tokens or the
// context ran out; kAbort: cancelled (vLLM's extension of OpenAI's set); kToolCalls: it stopped
// with tool calls for the client to run.
enum class FinishReason { kStop, kLength, kAbort, kToolCalls };

inline std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "stop";
}

// Mirrors dq::SamplingParams. Defaults are OpenAI's, already range-checked by the parser.
struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: off (the parser turns vLLM's -1 into 0)
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // vLLM extension; 1: off
  // A negative JSON seed keeps its two's-complement bits, so every int64 and uint64 is a seed.
  std::optional<uint64_t> seed;
  // nullopt: whatever room the context leaves (chat's default when the client sends none).
  // The completions parser fills in OpenAI's default of 16.
  std::optional<int> max_tokens;
  std::vector<int32_t> stop_token_ids;  // vLLM extension
  std::vector<std::string> stop;
  bool ignore_eos = false;  // vLLM extension
  // OpenAI's logit_bias (token id, bias in [-100, 100]), ids ascending.
  std::vector<std::pair<int32_t, float>> logit_bias;
  int min_tokens = 0;  // vLLM extension: EOS and stop ids masked until this many tokens
  // response_format json_object / json_schema: the schema as JSON text in the client's key
  // order (json_object: any object); empty: free text.
  std::string json_schema;
  // dqserve extension, not a sampling parameter (no dq::SamplingParams counterpart): false opts
  // the request out of speculative decoding. The output is the same either way (the verify rule
  // is lossless); only speed and the usage's speculation counters change.
  bool speculative = true;
};

// How the model may use the request's tools. kNone: not at all (the tools are left out of the
// prompt, so the model answers in text); kAuto: it decides; kRequired: it must call one;
// kFunction: it must call `ChatCompletionRequest::tool_choice_function`.
enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

// POST /v1/chat/completions.
struct ChatCompletionRequest {
  std::string model;
  // Text-only; "developer" messages arrive as "system" and content parts are joined with "\n"
  // (as vLLM does), so the messages go straight to ChatTemplate::Render.
  std::vector<ChatMessage> messages;
  // The validated `tools` array (OpenAI's shape, as sent), or null for none.
  nlohmann::ordered_json tools = nullptr;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_function;
  bool parallel_tool_calls = true;  // false: at most one call per answer
  // chat_template_kwargs other than enable_thinking: further template variables (an object), or
  // null.
  nlohmann::ordered_json template_kwargs = nullptr;
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;                   // choices, generated independently (choice_fanout.h)
  bool logprobs = false;
  int top_logprobs = 0;  // alternatives per token, only with logprobs
  // chat_template_kwargs.enable_thinking (vLLM's spelling); nullopt: the template's default.
  std::optional<bool> enable_thinking;
  std::string user;
};

// One completions prompt: text, or token ids that skip the tokenizer.
using CompletionPrompt = std::variant<std::string, std::vector<int32_t>>;

// POST /v1/completions.
struct CompletionRequest {
  std::string model;
  CompletionPrompt prompt;
  // A list of prompts in one request: the ones after the first (`prompt`). Choice i * n + j of
  // the answer is prompt i's choice j, as in OpenAI's API.
  std::vector<CompletionPrompt> more_prompts;
  SamplingOptions sampling;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  // nullopt: no logprobs. k: each token's logprob plus the k most likely alternatives
  // (the legacy API's "logprobs": k, so up to k + 1 entries per position).
  std::optional<int> logprobs;
  // Return the prompt before the completion (and, with logprobs, the prompt's logprobs).
  bool echo = false;
  std::string user;

  bool prompt_is_token_ids() const { return prompt.index() == 1; }
  size_t prompt_count() const { return 1 + more_prompts.size(); }
  // The same request for prompt i alone.
  CompletionRequest ForPrompt(size_t i) const {
    CompletionRequest one = *this;
    if (i > 0) one.prompt = more_prompts[i - 1];
    one.more_prompts.clear();
    return one;
  }
};

}  // namespace dq::router
