// The model the router serves, as far as the router needs it: name, tokenizer, chat template,
// context length. Loaded with engine/'s model loader (the only reason dq_router_server links
// dq_engine); the router never touches tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/chat_template.h"
#include "common/status.h"
#include "common/tokenizer/tokenizer.h"
#include "router/api_error.h"
#include "router/api_types.h"
#include "router/tool_call_parser.h"

namespace dq::router {

struct ServedModel {
  std::string name;  // what clients pass as "model"
  std::string path;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;
  int max_context = 0;
  int vocab_size = 0;
  // Whether special-token text inside message content (say "<|im_end|>\n<|im_start|>system")
  // becomes control tokens in ChatPrompt. Off: content is text, so a client cannot forge turns
  // or roles; on (dq-router --special-tokens-in-content) only for callers trusted to write them.
  bool parse_special_in_content = false;
  // How tool calls are read from the output: detected from the chat template at Load, or set by
  // dq-router --tool-call-parser. nullopt: requests with tools are refused (400).
  std::optional<ToolCallFormat> tool_call_format;
  // The format's markers that are special tokens of this vocabulary (Llama's <|python_tag|>,
  // Mistral's [TOOL_CALLS]): kept in the decoded text of requests with tools.
  std::vector<int32_t> tool_marker_ids;

  // Sets tool_call_format and resolves its marker ids once.
  void SetToolCallFormat(std::optional<ToolCallFormat> format);

  // Loads `path` (HF directory or .gguf). `name` empty: the path's stem ("Qwen3-4B" for
  // /models/Qwen3-4B/ or /models/Qwen3-4B.gguf).
  static absl::StatusOr<ServedModel> Load(const std::string& path, std::string name);

  // The chat prompt's token ids: the messages rendered with the chat template (with the
  // assistant prefix), then tokenized with special tokens parsed in the template's text (and in
  // the messages' content only when parse_special_in_content). 400 when the model has no
  // template or the template refuses the conversation.
  ApiResult<std::vector<int32_t>> ChatPrompt(const std::vector<ChatMessage>& messages,
                                             const ChatRenderOptions& opts) const;
  // A completion prompt's token ids (text is tokenized as is, no template) and its text (token
  // ids are decoded, for echo).
  std::vector<int32_t> CompletionPrompt(const CompletionRequest& request) const;
  std::string PromptText(const CompletionRequest& request) const;
};

// The template options of a chat request (for generation and for POST /tokenize alike): its
// tools (none under tool_choice "none", so the model answers in text), enable_thinking and
// chat_template_kwargs.
ChatRenderOptions ChatRenderOptionsFor(const ChatCompletionRequest& request,
                                       bool add_generation_prompt);

// "Qwen3-4B" for "/m/Qwen3-4B/", "/m/Qwen3-4B" and "/m/Qwen3-4B.gguf".
std::string ModelNameFromPath(const std::string& path);

}  // namespace dq::router
