#include "router/tool_call_stream.h"

#include <utility>

#include "router/forced_tool_call.h"

namespace dq::router {
namespace {

void Append(ToolCallParser::Output out, ChatChoice* choice) {
  choice->content += out.content;
  for (ChatToolCall& call : out.calls) choice->tool_calls.push_back(std::move(call));
}

std::string StreamEvents(const ToolCallParser::Output& out, std::span<const TokenLogprobs> logprobs,
                         ChatCompletionStream& stream) {
  std::string events;
  if (!out.content.empty() || !logprobs.empty())
    events += stream.ContentChunk(out.content, logprobs);
  for (const ChatToolCall& call : out.calls) events += stream.ToolCallChunk(call);
  return events;
}

}  // namespace

ToolCallStream::ToolCallStream(std::optional<ToolCallFormat> format, int max_calls) {
  if (format) parser_.emplace(*format, max_calls);
}

ToolCallStream ToolCallStream::For(const ChatCompletionRequest& request, const ServedModel& model) {
  if (request.tools.is_null() || request.tool_choice == ToolChoice::kNone) {
    return ToolCallStream(std::nullopt);
  }
  // A forced call's answer is the call object alone ({"name": ..., "arguments": ...}), the shape
  // the Llama 3 JSON parser reads whole at the end; the grammar allows exactly one.
  if (ForcesToolCall(request)) return ToolCallStream(ToolCallFormat::kLlama3Json, 1);
  return ToolCallStream(model.tool_call_format, request.parallel_tool_calls ? 0 : 1);
}

ToolCallParser::Output ToolCallStream::Feed(const std::string& text) {
  if (!parser_) return {text, {}};
  return parser_->Feed(text);
}

ToolCallParser::Output ToolCallStream::End() {
  if (!parser_) return {};
  return parser_->Finish();
}

void ToolCallStream::Add(const Delta& delta, ChatChoice* choice) {
  Append(Feed(delta.text), choice);
}

void ToolCallStream::Finish(FinishReason generation, ChatChoice* choice) {
  Append(End(), choice);
  choice->finish_reason = Reason(generation);
}

std::string ToolCallStream::Events(const Delta& delta, std::span<const TokenLogprobs> logprobs,
                                   ChatCompletionStream& stream) {
  return StreamEvents(Feed(delta.text), logprobs, stream);
}

std::string ToolCallStream::FinishEvents(FinishReason generation, ChatCompletionStream& stream) {
  std::string events = StreamEvents(End(), {}, stream);  // first: the last calls set Reason
  return events + stream.FinishChunk(Reason(generation));
}

FinishReason ToolCallStream::Reason(FinishReason generation) const {
  if (generation == FinishReason::kStop && parser_ && parser_->called()) {
    return FinishReason::kToolCalls;
  }
  return generation;
}

}  // namespace dq::router
