#include "common/chat_template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/jinja/chat.h"

namespace dq {

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view jinja_source,
                                                 ChatSpecialTokens tokens) {
  absl::StatusOr<jinja::JinjaTemplate> t = jinja::JinjaTemplate::Parse(jinja_source);
  if (!t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat ", t.status().message()));
  }
  return ChatTemplate(*std::move(t), std::string(jinja_source), std::move(tokens));
}

absl::StatusOr<RenderedChat> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                  const ChatRenderOptions& opts) const {
  if (messages.empty()) return absl::InvalidArgumentError("a conversation needs a message");
  absl::StatusOr<RenderedChat> r =
      jinja::RenderChat(template_, jinja::ChatInputsFor(messages, opts, tokens_));
  if (!r.ok()) {
    // Whatever the template or the interpreter refused is about this conversation (a role
    // order the template raises on, a limit), so the caller's request is what is wrong.
    return absl::InvalidArgumentError(absl::StrCat("chat ", r.status().message()));
  }
  return r;
}

}  // namespace dq
