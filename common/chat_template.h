// A model's chat template: the Jinja source it ships (tokenizer_config.json's "chat_template",
// chat_template.jinja beside it, or GGUF's tokenizer.chat_template), run by common/jinja with the
// variables Hugging Face transformers' apply_chat_template passes (messages, tools,
// add_generation_prompt, bos_token, eos_token, extra kwargs such as enable_thinking). Any
// template jinja2 renders is accepted; renderings are byte-identical to transformers'
// (tests/golden/chat/, tests/golden/jinja/).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/jinja/template.h"
#include "common/text_range.h"
#include "nlohmann/json.hpp"

namespace dq {

// A function call an assistant turn made (OpenAI's message.tool_calls[i]).
struct ChatToolCall {
  std::string id;
  std::string name;
  // The arguments as JSON text, as OpenAI clients send them. A JSON object reaches the template
  // as a dict (templates print it with |tojson, as transformers expects); anything else as the
  // string itself.
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // system, user, assistant, tool: the roles the template knows
  // Null or absent content (an assistant turn that only calls tools) is "", as vLLM passes it:
  // templates such as Qwen3's fail on None.
  std::string content;
  // An earlier assistant turn's reasoning, which some templates (Qwen3's) print before content.
  std::optional<std::string> reasoning_content;
  std::vector<ChatToolCall> tool_calls;  // assistant turns
  std::string tool_call_id;              // tool turns: the call this answers; empty: none
  std::string name;                      // the optional participant / tool name
};

// A rendered prompt and where in it the messages' content went. Bytes inside `content` were
// copied from what the client sent (message content, tool schemas and arguments, kwargs: the
// caller's, untrusted text); every other byte (turn markers, role names, a default system
// prompt) was written by the template. The tokenizer uses this to parse special tokens only in
// the template's bytes (Tokenizer::EncodeSpecialOutside), so content cannot forge a turn.
struct RenderedChat {
  std::string text;
  // Non-empty, sorted, disjoint and non-adjacent ranges of `text`.
  std::vector<TextRange> content;
};

struct ChatRenderOptions {
  // End with the header of an assistant turn, so the model writes the reply.
  bool add_generation_prompt = true;
  // Passed to the template only when set (Qwen3's switch: false turns reasoning off).
  std::optional<bool> enable_thinking;
  // OpenAI's `tools` array ([{"type": "function", "function": {...}}]), or null for none.
  nlohmann::ordered_json tools = nullptr;
  // Further template variables (the request's chat_template_kwargs), an object or null.
  nlohmann::ordered_json kwargs = nullptr;
};

// The special tokens' text the template may print (bos_token, eos_token); empty: none.
struct ChatSpecialTokens {
  std::string bos;
  std::string eos;
};

class ChatTemplate {
 public:
  // InvalidArgument ("chat template:LINE:COL: ...") when `jinja_source` is not a template.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view jinja_source,
                                            ChatSpecialTokens tokens = {});

  // The prompt for `messages`, with the byte ranges that came from the client. Errors
  // (InvalidArgument): no messages, or the template refused the conversation (its
  // raise_exception message, e.g. "Conversation roles must alternate user/assistant/...").
  absl::StatusOr<RenderedChat> Render(std::span<const ChatMessage> messages,
                                      const ChatRenderOptions& opts) const;

  const std::string& source() const { return source_; }
  const ChatSpecialTokens& special_tokens() const { return tokens_; }

 private:
  ChatTemplate(jinja::JinjaTemplate t, std::string source, ChatSpecialTokens tokens)
      : template_(std::move(t)), source_(std::move(source)), tokens_(std::move(tokens)) {}

  jinja::JinjaTemplate template_;
  std::string source_;
  ChatSpecialTokens tokens_;
};

}  // namespace dq
