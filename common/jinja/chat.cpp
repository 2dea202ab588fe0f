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

// A tool call in OpenAI's shape, its arguments a dict when they parse as a JSON object.
nlohmann::ordered_json ToolCallJson(const ChatToolCall& c) {
  nlohmann::ordered_json args = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
  if (!args.is_object()) args = c.arguments;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!c.id.empty()) j["id"] = c.id;
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", std::move(args)}};
  return j;
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
  if (in.kwargs.is_object()) {
    const size_t fixed = ctx.size();
    for (const auto& [k, v] : in.kwargs.items()) {
      bool taken = false;
      for (size_t i = 0; i < fixed; ++i) taken = taken || ctx[i].first.str() == k;
      if (!taken) ctx.emplace_back(Value::String(k), FromJson(v, /*user_strings=*/true));
    }
  }
  return Value::Dict(std::move(ctx));
}

absl::StatusOr<RenderedChat> RenderChat(const JinjaTemplate& t, const ChatInputs& in,
                                        const RenderOptions& opts) {
  absl::StatusOr<Str> s = t.RenderWithProvenance(ChatContext(in), opts);
  if (!s.ok()) return s.status();
  return RenderedChat{std::move(s->text), std::move(s->user)};
}

ChatInputs ChatInputsFor(std::span<const ChatMessage> messages, const ChatRenderOptions& opts,
                         const ChatSpecialTokens& tokens) {
  ChatInputs in;
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json j = {{"role", m.role}};
    j["content"] = m.content;
    if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
    if (!m.name.empty()) j["name"] = m.name;
    if (!m.tool_calls.empty()) {
      j["tool_calls"] = nlohmann::ordered_json::array();
      for (const ChatToolCall& c : m.tool_calls) j["tool_calls"].push_back(ToolCallJson(c));
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    in.messages.push_back(std::move(j));
  }
  in.tools = opts.tools;
  in.kwargs = opts.kwargs;
  in.add_generation_prompt = opts.add_generation_prompt;
  in.enable_thinking = opts.enable_thinking;
  in.bos_token = tokens.bos;
  in.eos_token = tokens.eos;
  return in;
}

}  // namespace dq::jinja
