// Tool calls in a model's output, in the format of its family, as OpenAI's API returns them:
// message.tool_calls (streamed as delta.tool_calls) beside the rest of the text as content.
//
//   kHermes     Hermes / Qwen2.5 / Qwen3: <tool_call>\n{"name": ..., "arguments":
//   {...}}\n</tool_call>
//               one block per call, anywhere in the text.
//   kLlama3Json Llama 3.1-3.3: the whole answer is {"name": ..., "parameters": {...}} (or
//               "arguments"), optionally after <|python_tag|>, several separated by ';'.
//   kMistral    Mistral / Mixtral / Nemo: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...], or
//               the newer [TOOL_CALLS]name[ARGS]{...} repeated (Small 3.2 puts [CALL_ID]id
//               before [ARGS]; that id is dropped, the server makes its own).
// Text that looks like a call but does not parse as one stays content (as vLLM's parsers do), so
// nothing the model wrote is lost.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template.h"

namespace dq::router {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

// The format a chat template asks its model for (the markers it prints), or nullopt when the
// template does not describe tool calls.
std::optional<ToolCallFormat> DetectToolCallFormat(std::string_view template_source);
// "hermes", "llama3_json", "mistral" (vLLM's --tool-call-parser names).
absl::StatusOr<ToolCallFormat> ToolCallFormatNamed(std::string_view name);
std::string_view ToolCallFormatName(ToolCallFormat format);
// The marker texts of the format, which the detokenizer must keep even where they are special
// tokens (Llama's <|python_tag|>, Mistral's [TOOL_CALLS], [ARGS] and [CALL_ID]).
std::vector<std::string> ToolCallMarkers(ToolCallFormat format);

// Splits a stream of generated text into content and tool calls. Feed() returns what can be shown
// now (text that cannot begin a call) and the calls completed so far; Finish() the rest. Calls get
// fresh ids ("call_" and 24 alphanumerics; 9 alphanumerics for Mistral, whose templates require
// that shape). With `max_calls` 1 (parallel_tool_calls false) later calls are dropped.
class ToolCallParser {
 public:
  struct Output {
    std::string content;
    std::vector<ChatToolCall> calls;
  };

  explicit ToolCallParser(ToolCallFormat format, int max_calls = 0);

  Output Feed(std::string_view text);
  Output Finish();
  // Whether any call was returned: the answer's finish_reason is then "tool_calls".
  bool called() const { return calls_ > 0; }

 private:
  void FeedHermes(Output& out);
  void FinishWhole(Output& out);  // Llama 3 JSON and Mistral: the calls are parsed at the end
  void AddCall(std::string name, std::string arguments, Output& out);
  void EmitContent(std::string text, Output& out);

  ToolCallFormat format_;
  int max_calls_;
  int calls_ = 0;
  std::string buffer_;    // text not yet returned
  std::string space_;     // whitespace held back: shown only if more content follows
  bool in_call_ = false;  // kHermes: inside <tool_call>
  bool decided_ = false;  // kLlama3Json / kMistral: whether the answer is a call is known
  bool whole_ = false;    // ... and it is (or may be): hold everything until Finish
};

}  // namespace dq::router
