#include "common/jinja/chat.h"

#include "common/jinja/value_json.h"

namespace dq::jinja {
namespace {

// A message with its strings marked as user content, except the role.
Value MessageValue(const nlohmann::ordered_json& m) {
  if (!m.is_object()) return FromJson(m, true);
  std::vector<std::pair<Value, Value>> kv;
  for (const auto& [k, v] : m.items()) {
    kv.emplace_back(Value::String(k), FromJson(v, /*user_strings=*/k != "role"));
  }
  return Value::Dict(std::move(kv));
}

}  // namespace

Value ChatContext(const ChatInputs& in) {
  std::vector<Value> messages;
  for (const auto& m : in.messages) messages.push_back(MessageValue(m));
  std::vector<std::pair<Value, Value>> ctx = {
      {Value::String("messages"), Value::List(std::move(messages))},
      {Value::String("tools"), in.tools.is_null() ? Value::None() : FromJson(in.tools, true)},
      {Value::String("documents"), Value::None()},
      {Value::String("add_generation_prompt"), Value::Bool(in.add_generation_prompt)},
      {Value::String("bos_token"), Value::String(in.bos_token)},
      {Value::String("eos_token"), Value::String(in.eos_token)},
  };
  if (in.enable_thinking) {
    ctx.emplace_back(Value::String("enable_thinking"), Value::Bool(*in.enable_thinking));
  }
  return Value::Dict(std::move(ctx));
}

absl::StatusOr<RenderedChat> RenderChat(const JinjaTemplate& t, const ChatInputs& in,
                                        const RenderOptions& opts) {
  absl::StatusOr<Str> s = t.RenderWithProvenance(ChatContext(in), opts);
  if (!s.ok()) return s.status();
  return RenderedChat{std::move(s->text), std::move(s->user)};
}

ChatInputs ChatInputsFor(std::span<const ChatMessage> messages, const ChatRenderOptions& opts) {
  ChatInputs in;
  for (const ChatMessage& m : messages) {
    in.messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  in.add_generation_prompt = opts.add_generation_prompt;
  in.enable_thinking = opts.enable_thinking;
  return in;
}

}  // namespace dq::jinja
