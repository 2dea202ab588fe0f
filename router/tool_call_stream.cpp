#include "router/tool_call_stream.h"

namespace dq::router {

ToolCallStream::ToolCallStream(std::optional<ToolCallFormat> format, int max_calls) {
  if (format) parser_.emplace(*format, max_calls);
}

ToolCallStream ToolCallStream::For(const ChatCompletionRequest& request, const ServedModel& model) {
  if (request.tools.is_null() || request.tool_choice == ToolChoice::kNone) {
    return ToolCallStream(std::nullopt);
  }
  return ToolCallStream(model.tool_call_format, request.parallel_tool_calls ? 0 : 1);
}

ToolCallParser::Output ToolCallStream::Feed(const Delta& delta) {
  if (!parser_) return {delta.text, {}};
  return parser_->Feed(delta.text);
}

ToolCallParser::Output ToolCallStream::Finish() {
  if (!parser_) return {};
  return parser_->Finish();
}

FinishReason ToolCallStream::Reason(FinishReason generation) const {
  if (generation == FinishReason::kStop && parser_ && parser_->called()) {
    return FinishReason::kToolCalls;
  }
  return generation;
}

}  // namespace dq::router
