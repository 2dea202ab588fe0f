#include "common/chat_template.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "common/status.h"

namespace dq {
namespace {

// ---------------------------------------------------------------------------------------------
// The published templates. SmolLM2's and plain ChatML's are Hugging Face's tokenizer_config.json
// strings; Qwen3's is Qwen/Qwen3-0.6B's (identical across the Qwen3 family, also in
// tests/golden/chat/qwen3_template.jinja).

constexpr std::string_view kSmolLM2Source =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr std::string_view kChatMLSource =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr std::string_view kQwen3Source =
    R"j({%- if tools %})j"
    "\n"
    R"j(    {{- '<|im_start|>system\n' }})j"
    "\n"
    R"j(    {%- if messages[0].role == 'system' %})j"
    "\n"
    R"j(        {{- messages[0].content + '\n\n' }})j"
    "\n"
    R"j(    {%- endif %})j"
    "\n"
    R"j(    {{- "# Tools\n\nYou may call one or more functions to assist with the user q)j"
    R"j(uery.\n\nYou are provided with function signatures within <tools></tools> XML ta)j"
    R"j(gs:\n<tools>" }})j"
    "\n"
    R"j(    {%- for tool in tools %})j"
    "\n"
    R"j(        {{- "\n" }})j"
    "\n"
    R"j(        {{- tool | tojson }})j"
    "\n"
    R"j(    {%- endfor %})j"
    "\n"
    R"j(    {{- "\n</tools>\n\nFor each function call, return a json object with functio)j"
    R"j(n name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"n)j"
    R"j(ame\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end)j"
    R"j(|>\n" }})j"
    "\n"
    R"j({%- else %})j"
    "\n"
    R"j(    {%- if messages[0].role == 'system' %})j"
    "\n"
    R"j(        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }})j"
    "\n"
    R"j(    {%- endif %})j"
    "\n"
    R"j({%- endif %})j"
    "\n"
    R"j({%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - )j"
    R"j(1) %})j"
    "\n"
    R"j({%- for message in messages[::-1] %})j"
    "\n"
    R"j(    {%- set index = (messages|length - 1) - loop.index0 %})j"
    "\n"
    R"j(    {%- if ns.multi_step_tool and message.role == "user" and not(message.content)j"
    R"j(.startswith('<tool_response>') and message.content.endswith('</tool_response>')))j"
    R"j( %})j"
    "\n"
    R"j(        {%- set ns.multi_step_tool = false %})j"
    "\n"
    R"j(        {%- set ns.last_query_index = index %})j"
    "\n"
    R"j(    {%- endif %})j"
    "\n"
    R"j({%- endfor %})j"
    "\n"
    R"j({%- for message in messages %})j"
    "\n"
    R"j(    {%- if (message.role == "user") or (message.role == "system" and not loop.fi)j"
    R"j(rst) %})j"
    "\n"
    R"j(        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>)j"
    R"j(' + '\n' }})j"
    "\n"
    R"j(    {%- elif message.role == "assistant" %})j"
    "\n"
    R"j(        {%- set content = message.content %})j"
    "\n"
    R"j(        {%- set reasoning_content = '' %})j"
    "\n"
    R"j(        {%- if message.reasoning_content is defined and message.reasoning_conten)j"
    R"j(t is not none %})j"
    "\n"
    R"j(            {%- set reasoning_content = message.reasoning_content %})j"
    "\n"
    R"j(        {%- else %})j"
    "\n"
    R"j(            {%- if '</think>' in message.content %})j"
    "\n"
    R"j(                {%- set content = message.content.split('</think>')[-1].lstrip(')j"
    R"j(\n') %})j"
    "\n"
    R"j(                {%- set reasoning_content = message.content.split('</think>')[0])j"
    R"j(.rstrip('\n').split('<think>')[-1].lstrip('\n') %})j"
    "\n"
    R"j(            {%- endif %})j"
    "\n"
    R"j(        {%- endif %})j"
    "\n"
    R"j(        {%- if loop.index0 > ns.last_query_index %})j"
    "\n"
    R"j(            {%- if loop.last or (not loop.last and reasoning_content) %})j"
    "\n"
    R"j(                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_co)j"
    R"j(ntent.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }})j"
    "\n"
    R"j(            {%- else %})j"
    "\n"
    R"j(                {{- '<|im_start|>' + message.role + '\n' + content }})j"
    "\n"
    R"j(            {%- endif %})j"
    "\n"
    R"j(        {%- else %})j"
    "\n"
    R"j(            {{- '<|im_start|>' + message.role + '\n' + content }})j"
    "\n"
    R"j(        {%- endif %})j"
    "\n"
    R"j(        {%- if message.tool_calls %})j"
    "\n"
    R"j(            {%- for tool_call in message.tool_calls %})j"
    "\n"
    R"j(                {%- if (loop.first and content) or (not loop.first) %})j"
    "\n"
    R"j(                    {{- '\n' }})j"
    "\n"
    R"j(                {%- endif %})j"
    "\n"
    R"j(                {%- if tool_call.function %})j"
    "\n"
    R"j(                    {%- set tool_call = tool_call.function %})j"
    "\n"
    R"j(                {%- endif %})j"
    "\n"
    R"j(                {{- '<tool_call>\n{"name": "' }})j"
    "\n"
    R"j(                {{- tool_call.name }})j"
    "\n"
    R"j(                {{- '", "arguments": ' }})j"
    "\n"
    R"j(                {%- if tool_call.arguments is string %})j"
    "\n"
    R"j(                    {{- tool_call.arguments }})j"
    "\n"
    R"j(                {%- else %})j"
    "\n"
    R"j(                    {{- tool_call.arguments | tojson }})j"
    "\n"
    R"j(                {%- endif %})j"
    "\n"
    R"j(                {{- '}\n</tool_call>' }})j"
    "\n"
    R"j(            {%- endfor %})j"
    "\n"
    R"j(        {%- endif %})j"
    "\n"
    R"j(        {{- '<|im_end|>\n' }})j"
    "\n"
    R"j(    {%- elif message.role == "tool" %})j"
    "\n"
    R"j(        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %})j"
    "\n"
    R"j(            {{- '<|im_start|>user' }})j"
    "\n"
    R"j(        {%- endif %})j"
    "\n"
    R"j(        {{- '\n<tool_response>\n' }})j"
    "\n"
    R"j(        {{- message.content }})j"
    "\n"
    R"j(        {{- '\n</tool_response>' }})j"
    "\n"
    R"j(        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %})j"
    "\n"
    R"j(            {{- '<|im_end|>\n' }})j"
    "\n"
    R"j(        {%- endif %})j"
    "\n"
    R"j(    {%- endif %})j"
    "\n"
    R"j({%- endfor %})j"
    "\n"
    R"j({%- if add_generation_prompt %})j"
    "\n"
    R"j(    {{- '<|im_start|>assistant\n' }})j"
    "\n"
    R"j(    {%- if enable_thinking is defined and enable_thinking is false %})j"
    "\n"
    R"j(        {{- '<think>\n\n</think>\n\n' }})j"
    "\n"
    R"j(    {%- endif %})j"
    "\n"
    R"j({%- endif %})j";

constexpr std::string_view kSmolLM2DefaultSystem =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n";

// absl here is built without std::string_view aliasing; this bridges the two.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string SourceSnippet(std::string_view source) {
  return absl::CHexEscape(AV(source.substr(0, 80)));
}

absl::Status Unsupported(std::string_view source, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported chat template (first 80 chars: \"", SourceSnippet(source), "\"",
      why.empty() ? "" : absl::StrCat("; ", AV(why)),
      "); supported: chatml (SmolLM2), chatml, qwen3. dq renders known templates natively "
      "instead of running Jinja; use a model with one of these templates or choose one by name "
      "(chatml-smollm2, chatml, qwen3)"));
}

constexpr std::array<ChatTemplate::Kind, 3> kAllKinds = {
    ChatTemplate::Kind::kChatMLSmolLM2, ChatTemplate::Kind::kChatML, ChatTemplate::Kind::kQwen3};

const std::string& NormalizedReference(ChatTemplate::Kind kind) {
  static const std::array<std::string, 3> kForms = [] {
    std::array<std::string, 3> forms;
    for (size_t i = 0; i < kAllKinds.size(); ++i) {
      forms[i] = *NormalizeJinjaForMatching(ChatTemplate::ReferenceSource(kAllKinds[i]));
    }
    return forms;
  }();
  return kForms[static_cast<size_t>(kind)];
}

// ---------------------------------------------------------------------------------------------
// Rendering.

absl::Status CheckMessages(std::span<const ChatMessage> messages, std::string_view name) {
  if (messages.empty()) {
    return absl::InvalidArgumentError("messages is empty; a chat needs at least one message");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "] has role \"", absl::CHexEscape(role), "\"; the ", AV(name),
          " chat template supports only system, user and assistant messages (tool messages and "
          "tool calls are not supported)"));
    }
    if (role == "system" && i > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i,
                       "] is a system message; only the first message may be a system "
                       "message: merge system instructions into messages[0]"));
    }
  }
  return absl::OkStatus();
}

// Builds the prompt text and its content ranges in the same appends, so the two cannot
// disagree: each piece is written either as template text or as message content.
class PromptBuilder {
 public:
  void Template(std::string_view s) { out_.text.append(s); }

  void Content(std::string_view s) {
    if (s.empty()) return;
    const size_t begin = out_.text.size();
    out_.text.append(s);
    std::vector<TextRange>& ranges = out_.content;
    if (!ranges.empty() && ranges.back().end == begin) {
      ranges.back().end = out_.text.size();  // Keeps the ranges non-adjacent.
    } else {
      ranges.push_back({begin, out_.text.size()});
    }
  }

  RenderedChat Take() && { return std::move(out_); }

 private:
  RenderedChat out_;
};

void AppendTurn(PromptBuilder& b, std::string_view role, std::string_view content) {
  b.Template("<|im_start|>");
  b.Template(role);  // Checked to be system, user or assistant: not free text.
  b.Template("\n");
  b.Content(content);
  b.Template("<|im_end|>\n");
}

RenderedChat RenderChatML(std::span<const ChatMessage> messages, const ChatRenderOptions& opts,
                          bool smollm2_default_system) {
  PromptBuilder b;
  if (smollm2_default_system && messages[0].role != "system") b.Template(kSmolLM2DefaultSystem);
  for (const ChatMessage& m : messages) AppendTurn(b, m.role, m.content);
  if (opts.add_generation_prompt) b.Template("<|im_start|>assistant\n");
  return std::move(b).Take();
}

// Python's str.lstrip/rstrip/strip('\n').
std::string_view LStripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view RStripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Qwen3's split of an assistant message into (reasoning, answer) when it has "</think>". Both
// are views into the message's content, so what is copied from them is content.
struct SplitThink {
  std::string_view reasoning;
  std::string_view content;
};
SplitThink SplitReasoning(std::string_view text) {
  SplitThink r{"", text};
  const size_t last_close = text.rfind("</think>");
  if (last_close == std::string_view::npos) return r;
  r.content = LStripNewlines(text.substr(last_close + 8));
  std::string_view before = RStripNewlines(text.substr(0, text.find("</think>")));
  const size_t open = before.rfind("<think>");
  if (open != std::string_view::npos) before.remove_prefix(open + 7);
  r.reasoning = LStripNewlines(before);
  return r;
}

// The last real user query: user messages that are wrapped tool responses do not count.
size_t LastQueryIndex(std::span<const ChatMessage> messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" &&
        !(absl::StartsWith(c, "<tool_response>") && absl::EndsWith(c, "</tool_response>"))) {
      return i;
    }
  }
  return messages.size() - 1;
}

RenderedChat RenderQwen3(std::span<const ChatMessage> messages, const ChatRenderOptions& opts) {
  const size_t n = messages.size();
  const size_t last_query = LastQueryIndex(messages);
  PromptBuilder b;
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant") {
      AppendTurn(b, m.role, m.content);  // system (first only) or user
      continue;
    }
    const SplitThink parts = SplitReasoning(m.content);
    b.Template("<|im_start|>assistant\n");
    // Reasoning is kept only after the last user query (the turn in progress); earlier turns
    // lose it.
    if (i > last_query && (i == n - 1 || !parts.reasoning.empty())) {
      b.Template("<think>\n");
      b.Content(RStripNewlines(LStripNewlines(parts.reasoning)));
      b.Template("\n</think>\n\n");
      b.Content(LStripNewlines(parts.content));
    } else {
      b.Content(parts.content);
    }
    b.Template("<|im_end|>\n");
  }
  if (opts.add_generation_prompt) {
    b.Template("<|im_start|>assistant\n");
    if (!opts.enable_thinking) b.Template("<think>\n\n</think>\n\n");
  }
  return std::move(b).Take();
}

}  // namespace

std::string_view ChatTemplate::ReferenceSource(Kind kind) {
  switch (kind) {
    case Kind::kChatMLSmolLM2:
      return kSmolLM2Source;
    case Kind::kChatML:
      return kChatMLSource;
    case Kind::kQwen3:
      return kQwen3Source;
  }
  return "";
}

std::string_view ChatTemplate::name() const {
  switch (kind_) {
    case Kind::kChatMLSmolLM2:
      return "chatml-smollm2";
    case Kind::kChatML:
      return "chatml";
    case Kind::kQwen3:
      return "qwen3";
  }
  return "unknown";
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromTemplateString(std::string_view jinja_source) {
  absl::StatusOr<std::string> form = NormalizeJinjaForMatching(jinja_source);
  if (!form.ok()) return Unsupported(jinja_source, std::string(form.status().message()));
  for (Kind kind : kAllKinds) {
    if (*form == NormalizedReference(kind)) return ChatTemplate(kind);
  }
  return Unsupported(jinja_source, "");
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromName(std::string_view name) {
  for (Kind kind : kAllKinds) {
    if (ChatTemplate(kind).name() == name) return ChatTemplate(kind);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown chat template name \"", absl::CHexEscape(AV(name)),
                   "\"; choose one of chatml-smollm2, chatml, qwen3"));
}

absl::StatusOr<std::string> ChatTemplate::Render(std::span<const ChatMessage> messages,
                                                 const ChatRenderOptions& opts) const {
  DQ_ASSIGN_OR_RETURN(RenderedChat rendered, RenderWithContentRanges(messages, opts));
  return std::move(rendered.text);
}

absl::StatusOr<RenderedChat> ChatTemplate::RenderWithContentRanges(
    std::span<const ChatMessage> messages, const ChatRenderOptions& opts) const {
  DQ_RETURN_IF_ERROR(CheckMessages(messages, name()));
  switch (kind_) {
    case Kind::kChatMLSmolLM2:
      return RenderChatML(messages, opts, /*smollm2_default_system=*/true);
    case Kind::kChatML:
      return RenderChatML(messages, opts, /*smollm2_default_system=*/false);
    case Kind::kQwen3:
      return RenderQwen3(messages, opts);
  }
  return absl::InternalError("unhandled chat template kind");
}

}  // namespace dq
