// Rendering a model's chat template for a conversation the way transformers'
// apply_chat_template does: the variables it passes (messages, tools, documents,
// add_generation_prompt, the special tokens, extra kwargs such as enable_thinking), with every
// string the client sent marked as user content, so that RenderedChat::content says which bytes
// of the prompt must not be parsed for special tokens.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "common/chat_template.h"
#include "common/jinja/template.h"
#include "nlohmann/json.hpp"

namespace dq::jinja {

struct ChatInputs {
  // OpenAI-style messages: role, content (a string or parts), tool_calls, tool_call_id, ...
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // The tools' JSON schemas, or null for none (transformers passes tools=None).
  nlohmann::ordered_json tools = nullptr;
  bool add_generation_prompt = true;
  // Passed only when set, as transformers passes only the kwargs it was given.
  std::optional<bool> enable_thinking;
  // Further variables (chat_template_kwargs), an object or null; names the context already has
  // are ignored (transformers refuses them as duplicate keyword arguments).
  nlohmann::ordered_json kwargs = nullptr;
  std::string bos_token;
  std::string eos_token;
};

// The template's variables. Every string under `messages`, `tools` and `kwargs` is user content
// except the roles (which the caller validates); the special tokens are the template's own text.
Value ChatContext(const ChatInputs& in);

absl::StatusOr<RenderedChat> RenderChat(const JinjaTemplate& t, const ChatInputs& in,
                                        const RenderOptions& opts = {});

// ChatInputs for ChatTemplate's typed messages: OpenAI's message shape, a tool call's arguments
// as a dict when they are a JSON object (what templates expect, as vLLM passes them).
ChatInputs ChatInputsFor(std::span<const ChatMessage> messages, const ChatRenderOptions& opts,
                         const ChatSpecialTokens& tokens = {});

}  // namespace dq::jinja
