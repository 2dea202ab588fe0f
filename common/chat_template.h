// Chat templates of the ChatML family, rendered natively (no Jinja interpreter).
//
// A model ships its chat template as Jinja source (tokenizer_config.json's "chat_template" or
// GGUF's tokenizer.chat_template). We recognise the templates we implement by comparing a
// normalised form of that source (whitespace that Jinja ignores, quote style, escapes and
// `x['name']` vs `x.name` do not matter) with the published templates, and refuse anything else
// with an error rather than guessing. Renderings are byte-identical to Hugging Face
// transformers' apply_chat_template (see tests/golden/chat/).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/text_range.h"

namespace dq {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// A rendered prompt and where in it the messages' content went. Bytes inside `content` were
// copied from a message's content (the caller's, untrusted text); every other byte (the
// <|im_start|>/<|im_end|> markers, role names, <think> tags the template adds, a default system
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
  // Qwen3 only: false pre-fills an empty <think></think> block, which turns reasoning off.
  bool enable_thinking = true;
};

class ChatTemplate {
 public:
  enum class Kind {
    // HuggingFaceTB/SmolLM2-*-Instruct: ChatML, plus a default system prompt when the
    // conversation has none.
    kChatMLSmolLM2,
    // Plain ChatML: <|im_start|>role\ncontent<|im_end|>\n per message.
    kChatML,
    // Qwen/Qwen3-*: ChatML with <think> reasoning handling and enable_thinking.
    kQwen3,
  };

  // Recognises `jinja_source` as one of the supported templates, or returns InvalidArgument
  // ("unsupported chat template (first 80 chars: ...); supported: ...").
  static absl::StatusOr<ChatTemplate> FromTemplateString(std::string_view jinja_source);

  // Picks a template by name ("chatml-smollm2", "chatml", "qwen3"), for an explicit override when
  // a model's own template is not recognised.
  static absl::StatusOr<ChatTemplate> FromName(std::string_view name);

  explicit ChatTemplate(Kind kind) : kind_(kind) {}

  Kind kind() const { return kind_; }
  // "chatml-smollm2", "chatml" or "qwen3".
  std::string_view name() const;

  // The prompt for `messages`. Errors (InvalidArgument): no messages, a role other than
  // system/user/assistant (tool messages and tool calls are not supported), or a system
  // message anywhere but first.
  absl::StatusOr<std::string> Render(std::span<const ChatMessage> messages,
                                     const ChatRenderOptions& opts) const;
  // The same text as Render, with the byte ranges of it that came from message content.
  absl::StatusOr<RenderedChat> RenderWithContentRanges(std::span<const ChatMessage> messages,
                                                       const ChatRenderOptions& opts) const;

  // The Jinja source of a supported template, as published by the model's authors.
  static std::string_view ReferenceSource(Kind kind);

 private:
  Kind kind_;
};

// Exposed for tests: the normalised form used for recognition, or InvalidArgument when the
// source cannot be tokenised (an unterminated tag or string).
absl::StatusOr<std::string> NormalizeJinjaForMatching(std::string_view jinja_source);

}  // namespace dq
