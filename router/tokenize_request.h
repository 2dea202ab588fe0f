// Bodies of vLLM's POST /tokenize and POST /detokenize (lm-eval's tokenizer_backend asks the
// server for its tokenizer). Parsing only; the answers are built in router/tokenize_endpoint.h.
//
// /tokenize, completion form: {model?, prompt: "text", add_special_tokens? (default true),
// return_token_strs?}. Chat form: {model?, messages, add_generation_prompt? (default true),
// continue_final_message? (only false), add_special_tokens? (default false), tools?,
// chat_template_kwargs?, return_token_strs?}; messages, tools and kwargs are read as
// /v1/chat/completions reads them (router/chat_request.h). Exactly one of prompt and messages.
// /detokenize: {model?, tokens: [ids in the vocabulary]}. Unknown fields are refused (400).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "router/api_error.h"
#include "router/api_types.h"
#include "router/openai_request.h"

namespace dq::router {

struct TokenizeRequest {
  std::string model;
  // The completion form's text; nullopt: the chat form (chat.messages is set).
  std::optional<std::string> prompt;
  ChatCompletionRequest chat;  // messages, tools, template kwargs, enable_thinking
  bool add_generation_prompt = true;
  // Accepted for vLLM's shape. This server's tokenizer adds no BOS/EOS on either form (it does
  // not model a tokenizer.json post_processor), so the ids are those /v1/completions and
  // /v1/chat/completions feed the model either way.
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

ApiResult<TokenizeRequest> ParseTokenizeRequest(std::string_view body, const ParseOptions& options);
ApiResult<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                    const ParseOptions& options);

}  // namespace dq::router
