// Parsing and validation of OpenAI-compatible request bodies:
//   POST /v1/chat/completions -> ChatCompletionRequest
//   POST /v1/completions      -> CompletionRequest
// Every problem becomes the ApiError the client sees, naming the field (param) and saying what
// was expected. Unknown fields are ignored, as OpenAI and vLLM do; known fields this server
// cannot honour (n > 1, best_of > 1, logit_bias, suffix, functions, a response_format
// other than text) are rejected rather than silently dropped, since ignoring them would change
// what the client gets. Tools (router/chat_request.h) are accepted with tool_choice "auto",
// "none", "required" or a named function and parallel_tool_calls; the calls are read from the
// output by router/tool_call_parser.h, and a forced call is held to its schema by constrained
// decoding (router/forced_tool_call.h, checked against the model in ChatGeneration;
// docs/serving.md).
//
// What is checked: the body is valid UTF-8 and valid JSON (an object, nested at most
// max_json_depth deep); model is one of the served models (404 model_not_found otherwise);
// messages is a non-empty array of {role, content} with role system/developer/user/assistant and
// content a string or an array of {"type":"text","text":...} parts (assistant content may be
// null); prompt is a non-empty string, token-id array, or a one-element array of either;
// max_tokens / max_completion_tokens >= 1; temperature [0, 2]; top_p (0, 1]; top_k -1, 0 or
// >= 1 (<= vocab_size when known); min_p [0, 1]; presence/frequency_penalty [-2, 2];
// repetition_penalty (0, 2]; seed any 64-bit integer; stop a string or up to
// max_stop_sequences non-empty strings; stop_token_ids and prompt token ids in [0, vocab_size);
// stream / echo / ignore_eos / speculative (dqserve: false opts out of drafting) booleans;
// stream_options only with stream; logprobs a boolean (chat) or an integer in [0, max_logprobs]
// (completions); top_logprobs in [0, max_logprobs] and only with logprobs; user a string. Every
// string is checked to be valid UTF-8. Context length needs the tokenizer, so it is checked later
// with ResolveMaxTokens.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/api_error.h"
#include "router/api_types.h"

namespace dq::router {

class FieldReader;

struct ParseOptions {
  // The model names this router serves. A request naming another model gets 404
  // model_not_found; a request naming none gets the first. Empty: any name is accepted.
  std::vector<std::string> served_models;
  // Token ids (prompt, stop_token_ids) must be below this, and top_k at most this. 0: unknown,
  // ids are only checked to be non-negative.
  int vocab_size = 0;
  // OpenAI allows 4 stop sequences; evaluation suites send more, so allow 16.
  int max_stop_sequences = 16;
  // OpenAI's (and vLLM's default) cap on logprobs / top_logprobs.
  int max_logprobs = 20;
  // Choices per request: n times the number of prompts (completions' list of prompts).
  int max_choices = 128;
  // Deeper bodies are refused before parsing: OpenAI bodies nest a few levels, and a deep
  // "[[[[..." must not cost the server its stack.
  size_t max_json_depth = 64;
};

ApiResult<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                            const ParseOptions& options);
ApiResult<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                    const ParseOptions& options);

// The same checks on a document that is already parsed (a batch file line, a test).
ApiResult<ChatCompletionRequest> ChatCompletionRequestFromJson(const nlohmann::json& body,
                                                               const ParseOptions& options);
ApiResult<CompletionRequest> CompletionRequestFromJson(const nlohmann::json& body,
                                                       const ParseOptions& options);

// The body as a JSON object, or the 400 a client gets for an empty body, invalid UTF-8 (with
// the byte offset), nesting deeper than max_depth, a syntax error (with the parser's position)
// or a top-level value that is not an object.
ApiResult<nlohmann::json> ParseJsonBody(std::string_view body, size_t max_depth = 64);

// OpenAI's context_length_exceeded error: prompt_tokens plus max_tokens do not fit in
// `context`. max_tokens <= 0 means the prompt alone leaves no room. param is "messages" for
// chat and "prompt" for completions.
ApiError PromptTooLong(int prompt_tokens, int max_tokens, int context,
                       ApiEndpoint endpoint = ApiEndpoint::kChatCompletions);

// The number of tokens to generate once the prompt is tokenized: `requested` when the prompt
// and it fit in `context`, all the room left when nothing was requested, otherwise
// PromptTooLong.
ApiResult<int> ResolveMaxTokens(std::optional<int> requested, int prompt_tokens, int context,
                                ApiEndpoint endpoint);

// Shared by the bodies that carry them (tokenize_request.cpp too).
// "model": one of options.served_models (404 model_not_found otherwise); absent: the first.
void ReadModel(FieldReader& f, const ParseOptions& options, std::string* model);
// `ids` (the value of `param`) as token ids, each in [0, vocab_size) (vocab_size 0: >= 0).
void ReadTokenIds(FieldReader& f, const nlohmann::json& ids, const std::string& param,
                  int vocab_size, std::vector<int32_t>* out);
// Takes tools and chat_template_kwargs from an ordered parse of `body` (the client's key order,
// which templates print with |tojson).
void KeepClientKeyOrder(std::string_view body, ChatCompletionRequest* r);

}  // namespace dq::router
